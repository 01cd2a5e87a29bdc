//! File access shared by every native reader.
//!
//! [`PosFile`] is the only way native code reads a local file through parquet:
//! every read is positional (`pread`), so any number of threads may read one
//! file at once. `parquet`'s own `ChunkReader for File` seeks a descriptor
//! (and `File::try_clone` shares that offset), so two readers of one file
//! moved each other's cursor (issue 16, defect 0). Reads are also checked
//! against the file's size before a buffer is allocated: a length field in a
//! corrupt footer or page header cannot make us allocate more than the file.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use parquet::errors::{ParquetError, Result as ParquetResult};
use parquet::file::reader::{ChunkReader, Length};

use crate::error::{Error, Result};

/// Buffer of a sequential reader handed to parquet (a column chunk splice, a page stream).
const READ_BUFFER: usize = 256 * 1024;

/// An immutable local file read only with positional reads; cheap to clone and share between threads.
#[derive(Clone, Debug)]
pub struct PosFile {
    file: Arc<File>,
    len: u64,
}

impl PosFile {
    /// Opens `path`; its size is taken once (data files are immutable).
    pub fn open(path: &Path) -> Result<PosFile> {
        let shown = || path.display().to_string();
        let file = File::open(path).map_err(|e| Error::io(shown(), e))?;
        let len = file.metadata().map_err(|e| Error::io(shown(), e))?.len();
        Ok(PosFile { file: Arc::new(file), len })
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check_range(&self, start: u64, length: u64) -> ParquetResult<()> {
        match start.checked_add(length) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(ParquetError::EOF(format!(
                "a read of {length} bytes at offset {start} goes past the end of the {}-byte file",
                self.len
            ))),
        }
    }
}

impl Length for PosFile {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for PosFile {
    type T = io::BufReader<PosRead>;

    fn get_read(&self, start: u64) -> ParquetResult<Self::T> {
        self.check_range(start, 0)?;
        Ok(io::BufReader::with_capacity(READ_BUFFER, PosRead { file: Arc::clone(&self.file), pos: start, end: self.len }))
    }

    fn get_bytes(&self, start: u64, length: usize) -> ParquetResult<Bytes> {
        self.check_range(start, length as u64)?;
        let mut buf = vec![0u8; length];
        self.file.read_exact_at(&mut buf, start)?;
        Ok(Bytes::from(buf))
    }
}

/// A sequential reader over one [`PosFile`] with its own position; ends at the file's end.
#[derive(Debug)]
pub struct PosRead {
    file: Arc<File>,
    pos: u64,
    end: u64,
}

impl Read for PosRead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.end.saturating_sub(self.pos);
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}
