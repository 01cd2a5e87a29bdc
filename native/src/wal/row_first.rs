//! The row-first WAL row codec (docs/FORMAT.md §11): the bytes of the rows a
//! WAL transaction carries, one row after another.
//!
//! ```text
//! rows   := row*
//! row    := field* -1 i32
//! field  := column_id i32 (>= 0) value        a non-null value
//!         | -(column_id + 3) i32              a null
//!         | -2 i32                            (first field only) the row deletes its key
//! value  := little-endian fixed width (bool: 1 byte) | len u32, bytes (strings, binary)
//! ```
//! Columns a row does not mention are null. Encoding walks Arrow arrays row by
//! row; decoding lifts rows straight into Arrow buffers, column by column.

use arrow::array::{
    make_array, Array, ArrayData, ArrayRef, AsArray, BinaryArray, BooleanArray, BooleanBufferBuilder, UInt8Array,
};
use arrow::buffer::{Buffer, MutableBuffer};
use arrow::datatypes::{DataType, Schema, SchemaRef};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};

use crate::error::{Error, Result};

const END: i32 = -1;
const DELETE: i32 = -2;

/// How one column's values are laid out in a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    Bool,
    Fixed(usize),
    /// u32 length + bytes; `large` selects i64 offsets when decoding.
    Var { large: bool },
}

fn layout(dt: &DataType) -> Option<Layout> {
    use DataType::*;
    Some(match dt {
        Boolean => Layout::Bool,
        Int8 | UInt8 => Layout::Fixed(1),
        Int16 | UInt16 | Float16 => Layout::Fixed(2),
        Int32 | UInt32 | Float32 | Date32 | Time32(_) => Layout::Fixed(4),
        Int64 | UInt64 | Float64 | Date64 | Time64(_) | Timestamp(_, _) | Duration(_) => Layout::Fixed(8),
        FixedSizeBinary(w) => Layout::Fixed(usize::try_from(*w).ok()?),
        Utf8 | Binary => Layout::Var { large: false },
        LargeUtf8 | LargeBinary => Layout::Var { large: true },
        _ => return None,
    })
}

/// Checks every column of `schema` can go through the WAL; names the first that cannot.
pub fn check_schema(schema: &Schema) -> Result<()> {
    for f in schema.fields() {
        if layout(f.data_type()).is_none() {
            return Err(Error::InvalidArgument(format!(
                "column {:?} of type {} cannot be written through the WAL (supported: booleans, integers, floats, \
                 dates, times, timestamps, durations, strings, binary)",
                f.name(),
                f.data_type()
            )));
        }
    }
    Ok(())
}

fn put_i32(out: &mut Vec<u8>, v: i32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Writes one value of `array` at `row` (non-null) in the row-first layout.
fn put_value(out: &mut Vec<u8>, array: &dyn Array, data: &ArrayData, layout: Layout, row: usize) {
    match layout {
        Layout::Bool => out.push(array.as_boolean().value(row) as u8),
        Layout::Fixed(w) => {
            let start = (data.offset() + row) * w;
            out.extend_from_slice(&data.buffers()[0].as_slice()[start..start + w]);
        }
        Layout::Var { large } => {
            let bytes: &[u8] = match (array.data_type(), large) {
                (DataType::Utf8, _) => array.as_string::<i32>().value(row).as_bytes(),
                (DataType::LargeUtf8, _) => array.as_string::<i64>().value(row).as_bytes(),
                (_, false) => array.as_binary::<i32>().value(row),
                (_, true) => array.as_binary::<i64>().value(row),
            };
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(bytes);
        }
    }
}

/// Encodes the rows of `batch`; `deletes[i]` marks row i as a delete of its key
/// (then only `key_columns` are written). Returns the bytes and each row's end offset.
pub fn encode(batch: &RecordBatch, deletes: Option<&BooleanArray>, key_columns: &[usize]) -> Result<(Vec<u8>, Vec<u64>)> {
    check_schema(batch.schema().as_ref())?;
    let layouts: Vec<Layout> = batch.schema().fields().iter().filter_map(|f| layout(f.data_type())).collect();
    let datas: Vec<ArrayData> = batch.columns().iter().map(|c| c.to_data()).collect();
    for (i, d) in datas.iter().enumerate() {
        if let Layout::Var { .. } = layouts[i] {
            continue;
        }
        if layouts[i] != Layout::Bool && d.buffers().is_empty() {
            return Err(Error::InvalidArgument(format!("column {i} has no value buffer")));
        }
    }
    let mut out = Vec::with_capacity(batch.num_rows() * (8 + 12 * batch.num_columns()));
    let mut ends = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        let is_delete = deletes.is_some_and(|d| d.is_valid(row) && d.value(row));
        if is_delete {
            put_i32(&mut out, DELETE);
        }
        for (c, col) in batch.columns().iter().enumerate() {
            if is_delete && !key_columns.contains(&c) {
                continue;
            }
            if col.is_null(row) {
                put_i32(&mut out, -(c as i32) - 3);
            } else {
                put_i32(&mut out, c as i32);
                put_value(&mut out, col.as_ref(), &datas[c], layouts[c], row);
            }
        }
        put_i32(&mut out, END);
        ends.push(out.len() as u64);
    }
    Ok((out, ends))
}

/// One column being decoded.
struct ColumnBuilder {
    layout: Layout,
    data_type: DataType,
    valid: BooleanBufferBuilder,
    values: MutableBuffer,
    bools: BooleanBufferBuilder,
    offsets: Vec<i64>,
    nulls: usize,
}

impl ColumnBuilder {
    fn new(data_type: &DataType, layout: Layout, rows: usize) -> Self {
        ColumnBuilder {
            layout,
            data_type: data_type.clone(),
            valid: BooleanBufferBuilder::new(rows),
            values: MutableBuffer::new(0),
            bools: BooleanBufferBuilder::new(if layout == Layout::Bool { rows } else { 0 }),
            offsets: if matches!(layout, Layout::Var { .. }) { vec![0] } else { Vec::new() },
            nulls: 0,
        }
    }

    fn push_null(&mut self) {
        self.valid.append(false);
        self.nulls += 1;
        match self.layout {
            Layout::Bool => self.bools.append(false),
            Layout::Fixed(w) => self.values.extend_zeros(w),
            Layout::Var { .. } => self.offsets.push(self.values.len() as i64),
        }
    }

    /// Reads one value at `pos`; returns the position after it.
    fn push_value(&mut self, buf: &[u8], pos: usize, object: &str) -> Result<usize> {
        self.valid.append(true);
        let take = |n: usize| buf.get(pos..pos + n).ok_or_else(|| truncated(object, pos));
        match self.layout {
            Layout::Bool => {
                self.bools.append(take(1)?[0] != 0);
                Ok(pos + 1)
            }
            Layout::Fixed(w) => {
                self.values.extend_from_slice(take(w)?);
                Ok(pos + w)
            }
            Layout::Var { .. } => {
                let len = u32::from_le_bytes(take(4)?.try_into().map_err(|_| truncated(object, pos))?) as usize;
                let bytes = buf.get(pos + 4..pos + 4 + len).ok_or_else(|| truncated(object, pos))?;
                self.values.extend_from_slice(bytes);
                self.offsets.push(self.values.len() as i64);
                Ok(pos + 4 + len)
            }
        }
    }

    fn finish(mut self, rows: usize, object: &str) -> Result<ArrayRef> {
        let nulls = (self.nulls > 0).then(|| self.valid.finish().into_inner());
        let mut b = ArrayData::builder(self.data_type.clone()).len(rows).null_bit_buffer(nulls);
        b = match self.layout {
            Layout::Bool => b.add_buffer(self.bools.finish().into_inner()),
            Layout::Fixed(_) => b.add_buffer(self.values.into()),
            Layout::Var { large } => {
                let offsets = if large {
                    Buffer::from_vec(self.offsets)
                } else {
                    let small: Vec<i32> = self
                        .offsets
                        .iter()
                        .map(|o| i32::try_from(*o))
                        .collect::<std::result::Result<_, _>>()
                        .map_err(|_| Error::InvalidArgument(format!("{object}: more than 2 GiB of strings in one batch")))?;
                    Buffer::from_vec(small)
                };
                b.add_buffer(offsets).add_buffer(self.values.into())
            }
        };
        let data = b.build().map_err(|e| corrupt(object, format!("decoded column is invalid ({e})")))?;
        Ok(make_array(data))
    }
}

fn corrupt(object: &str, reason: impl Into<String>) -> Error {
    Error::Corrupt { object: object.to_string(), reason: reason.into() }
}

fn truncated(object: &str, pos: usize) -> Error {
    corrupt(object, format!("row data ends inside a value at byte {pos}"))
}

fn read_i32(buf: &[u8], pos: usize, object: &str) -> Result<i32> {
    let b = buf.get(pos..pos + 4).ok_or_else(|| truncated(object, pos))?;
    Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Decoded rows: the batch (in the table schema) and which rows are deletes.
pub struct Decoded {
    pub batch: RecordBatch,
    pub deletes: Vec<bool>,
}

/// Decodes every row of `rows` into Arrow columns of `schema`; `object` names the source in errors.
pub fn decode(rows: &[u8], schema: SchemaRef, object: &str) -> Result<Decoded> {
    check_schema(schema.as_ref())?;
    let layouts: Vec<Layout> = schema.fields().iter().filter_map(|f| layout(f.data_type())).collect();
    let ncols = layouts.len();
    let mut builders: Vec<ColumnBuilder> =
        schema.fields().iter().zip(&layouts).map(|(f, l)| ColumnBuilder::new(f.data_type(), *l, 1024)).collect();
    let mut deletes = Vec::new();
    let mut seen = vec![false; ncols];
    let mut pos = 0;
    let mut n = 0;
    while pos < rows.len() {
        seen.iter_mut().for_each(|s| *s = false);
        let mut delete = false;
        let mut first = true;
        loop {
            let h = read_i32(rows, pos, object)?;
            pos += 4;
            if h == END {
                break;
            }
            if h == DELETE {
                if !first {
                    return Err(corrupt(object, format!("delete marker inside row {n}")));
                }
                delete = true;
                first = false;
                continue;
            }
            first = false;
            let (col, null) = if h >= 0 { (h as usize, false) } else { ((-(h as i64) - 3) as usize, true) };
            if col >= ncols || seen[col] {
                return Err(corrupt(object, format!("row {n} names column {col} twice or out of range ({ncols} columns)")));
            }
            // Columns a row skips are null: fill up to this one.
            seen[col] = true;
            if null {
                builders[col].push_null();
            } else {
                pos = builders[col].push_value(rows, pos, object)?;
            }
        }
        for (c, s) in seen.iter().enumerate() {
            if !s {
                builders[c].push_null();
            }
        }
        deletes.push(delete);
        n += 1;
    }
    let columns: Vec<ArrayRef> = builders.into_iter().map(|b| b.finish(n, object)).collect::<Result<_>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(n));
    let batch = RecordBatch::try_new_with_options(schema, columns, &options)
        .map_err(|e| corrupt(object, format!("decoded rows do not form a batch ({e})")))?;
    Ok(Decoded { batch, deletes })
}

/// Decodes the non-null values of a (large) binary array, one encoded row each (a
/// memtable's newest entries), into a batch of `schema`.
pub fn decode_values(values: &dyn Array, schema: SchemaRef, object: &str) -> Result<RecordBatch> {
    let mut rows = Vec::new();
    match values.data_type() {
        DataType::Binary => values.as_binary::<i32>().iter().flatten().for_each(|v| rows.extend_from_slice(v)),
        DataType::LargeBinary => values.as_binary::<i64>().iter().flatten().for_each(|v| rows.extend_from_slice(v)),
        other => return Err(Error::InvalidArgument(format!("values must be binary, got {other}"))),
    }
    Ok(decode(&rows, schema, object)?.batch)
}

/// Splits encoded rows into one value per row (for the memtable), and decodes only the key column.
/// Returns (keys array in the key column's type, row bytes as a binary array, deletes as uint8).
pub fn split(rows: &[u8], schema: SchemaRef, key_column: usize, object: &str) -> Result<(ArrayRef, BinaryArray, UInt8Array)> {
    check_schema(schema.as_ref())?;
    let layouts: Vec<Layout> = schema.fields().iter().filter_map(|f| layout(f.data_type())).collect();
    let key_field = schema.fields().get(key_column).ok_or_else(|| Error::InvalidArgument(format!("no column {key_column}")))?;
    let mut keys = ColumnBuilder::new(key_field.data_type(), layouts[key_column], 1024);
    let mut ends: Vec<i32> = vec![0];
    let mut deletes = Vec::new();
    let mut pos = 0;
    let mut n = 0;
    while pos < rows.len() {
        let mut has_key = false;
        let mut delete = false;
        loop {
            let h = read_i32(rows, pos, object)?;
            pos += 4;
            if h == END {
                break;
            }
            if h == DELETE {
                delete = true;
                continue;
            }
            if h < 0 {
                if (-(h as i64) - 3) as usize == key_column {
                    return Err(corrupt(object, format!("row {n} has a null key")));
                }
                continue;
            }
            let col = h as usize;
            let layout = *layouts.get(col).ok_or_else(|| corrupt(object, format!("row {n} names column {col}")))?;
            if col == key_column {
                pos = keys.push_value(rows, pos, object)?;
                has_key = true;
            } else {
                pos = skip_value(rows, pos, layout, object)?;
            }
        }
        if !has_key {
            return Err(corrupt(object, format!("row {n} has no key")));
        }
        ends.push(i32::try_from(pos).map_err(|_| Error::InvalidArgument("split more than 2 GiB of rows at once".into()))?);
        deletes.push(delete as u8);
        n += 1;
    }
    let keys = keys.finish(n, object)?;
    let values = BinaryArray::try_new(
        arrow::buffer::OffsetBuffer::new(arrow::buffer::ScalarBuffer::from(ends)),
        Buffer::from(rows.to_vec()),
        None,
    )
    .map_err(|e| corrupt(object, format!("{e}")))?;
    Ok((keys, values, UInt8Array::from(deletes)))
}

fn skip_value(buf: &[u8], pos: usize, layout: Layout, object: &str) -> Result<usize> {
    let next = match layout {
        Layout::Bool => pos + 1,
        Layout::Fixed(w) => pos + w,
        Layout::Var { .. } => {
            let b = buf.get(pos..pos + 4).ok_or_else(|| truncated(object, pos))?;
            pos + 4 + u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize
        }
    };
    if next > buf.len() {
        return Err(truncated(object, pos));
    }
    Ok(next)
}
