//! File access shared by every native reader.
//!
//! [`PosFile`] is the only way native code reads a local file through parquet:
//! every read is positional (`pread`), so any number of threads may read one
//! file at once. `parquet`'s own `ChunkReader for File` seeks a descriptor
//! (and `File::try_clone` shares that offset), so two readers of one file
//! moved each other's cursor. Reads are also checked
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
        // No bigger than what is left of the file: a footer read is a few KB at its end, and a
        // 256 KiB buffer there cost an mmap, 64 page faults and zeroing for each file opened.
        let capacity = READ_BUFFER.min(usize::try_from(self.len - start).unwrap_or(READ_BUFFER));
        Ok(io::BufReader::with_capacity(capacity, PosRead { file: Arc::clone(&self.file), pos: start, end: self.len }))
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

/// How a CRC32C appears in result dicts and the manifest: `crc32c:` and 8 lowercase hex digits.
pub fn format_checksum(crc: u32) -> String {
    format!("crc32c:{crc:08x}")
}

/// The checksum of `data`, as [`format_checksum`] writes it.
pub fn checksum(data: &[u8]) -> String {
    format_checksum(crc32c::crc32c(data))
}

/// The checksum of the file at `path`, read in 1 MiB pieces.
pub fn file_checksum(path: &Path) -> Result<String> {
    let shown = || path.display().to_string();
    let mut file = File::open(path).map_err(|e| Error::io(shown(), e))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut crc = 0u32;
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(format_checksum(crc)),
            Ok(n) => crc = crc32c::crc32c_append(crc, &buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(shown(), e)),
        }
    }
}

/// Buffer between the parquet writer (which hands over 8 KiB pieces) and a data file: fewer,
/// larger `write`s for spliced chunks.
const WRITE_BUFFER: usize = 1 << 20;

/// A data file being written: checksummed as written, buffered in `WRITE_BUFFER` (1 MiB) pieces.
pub type OutputFile = HashingWriter<io::BufWriter<File>>;

impl OutputFile {
    pub fn new_file(file: File) -> OutputFile {
        HashingWriter::new(io::BufWriter::with_capacity(WRITE_BUFFER, file))
    }

    /// The file, once everything was flushed to it (parquet's `finish` flushes through).
    pub fn file(&self) -> &File {
        self.inner.get_ref()
    }
}

/// A writer that computes the CRC32C and the length of everything written through it, so a
/// file's checksum costs no second pass over its bytes.
#[derive(Debug)]
pub struct HashingWriter<W> {
    inner: W,
    crc: u32,
    len: u64,
}

impl<W: io::Write> HashingWriter<W> {
    pub fn new(inner: W) -> Self {
        HashingWriter { inner, crc: 0, len: 0 }
    }

    /// CRC32C of the bytes written so far.
    pub fn crc(&self) -> u32 {
        self.crc
    }

    /// Bytes written so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get_ref(&self) -> &W {
        &self.inner
    }
}

impl<W: io::Write> io::Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc = crc32c::crc32c_append(self.crc, &buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn a_sequential_read_buffers_no_more_than_what_is_left_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..(READ_BUFFER as u32 + 5000)).map(|i| i as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = PosFile::open(&path).unwrap();
        let end = data.len() as u64;
        // A footer's read at the end of a file: a few bytes of buffer, not READ_BUFFER.
        let near_end = file.get_read(end - 100).unwrap();
        assert_eq!(near_end.capacity(), 100);
        assert_eq!(near_end.bytes().map(|b| b.unwrap()).collect::<Vec<u8>>(), data[data.len() - 100..]);
        assert_eq!(file.get_read(0).unwrap().capacity(), READ_BUFFER);
        assert_eq!(file.get_read(end).unwrap().bytes().count(), 0);
        assert!(file.get_read(end + 1).is_err());
    }

    #[test]
    fn hashing_writer_matches_one_pass_checksum_and_file_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        let mut w = HashingWriter::new(File::create(&path).unwrap());
        for piece in data.chunks(70_001) {
            w.write_all(piece).unwrap();
        }
        w.flush().unwrap();
        assert_eq!(w.len(), data.len() as u64);
        assert_eq!(format_checksum(w.crc()), checksum(&data));
        assert_eq!(file_checksum(&path).unwrap(), checksum(&data));
        // CRC32C (Castagnoli) check value of "123456789"
        assert_eq!(checksum(b"123456789"), "crc32c:e3069283");
    }
}
