//! The GGUF container: `GGUF`, version, tensor and key/value counts, the key/value table, the
//! tensor table (name, dims innermost first, type, offset), then the data from the next multiple
//! of `general.alignment` (32 by default). Everything read from the file is checked before it is
//! used: counts against the bytes left, each tensor's range against the file, sizes against its
//! type's blocks, names for duplicates.

use std::collections::HashMap;

use anyhow::{anyhow, bail, ensure, Context, Result};

use crate::types::GgmlType;

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    Array(Vec<Value>),
    /// An array longer than [`MAX_KEPT`] (a language model's vocabulary): checked, not kept, so a
    /// file cannot make the reader hold many times its own size.
    Skipped {
        /// Its length.
        len: u64,
    },
}

/// Arrays up to this many values are kept ([`Value::Array`]); longer ones are skipped.
pub const MAX_KEPT: u64 = 1 << 16;

impl Value {
    /// The value as an integer, when it is one.
    pub fn as_i64(&self) -> Option<i64> {
        Some(match *self {
            Self::U8(v) => v.into(),
            Self::I8(v) => v.into(),
            Self::U16(v) => v.into(),
            Self::I16(v) => v.into(),
            Self::U32(v) => v.into(),
            Self::I32(v) => v.into(),
            Self::U64(v) => i64::try_from(v).ok()?,
            Self::I64(v) => v,
            _ => return None,
        })
    }

    /// The value as a string, when it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }
}

/// One tensor of the file.
#[derive(Clone, Debug)]
pub struct TensorInfo {
    pub name: String,
    pub ty: GgmlType,
    /// Dims outermost first (torch's order; the file stores them innermost first).
    pub dims: Vec<u64>,
    /// Byte range in the file.
    pub start: usize,
    pub end: usize,
}

impl TensorInfo {
    /// Values it holds.
    pub fn len(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Whether it holds no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A parsed GGUF file: its tables, with every tensor's bytes known to lie inside the file.
#[derive(Clone, Debug)]
pub struct GgufFile {
    pub version: u32,
    /// Key/value pairs in file order.
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
}

/// The file's first four bytes.
pub const MAGIC: &[u8; 4] = b"GGUF";

/// Arrays inside arrays deeper than this are refused (the format allows them; nothing
/// publishes them, and unbounded nesting would be unbounded recursion).
const MAX_DEPTH: usize = 4;
/// ggml allows 4 dims; ComfyUI-GGUF's `fix_5d_tensors.py` writes 5.
const MAX_DIMS: u32 = 8;

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        let left = (self.bytes.len() - self.at) as u64;
        if n > left {
            bail!("the file ends inside {what} (at byte {}, {n} bytes wanted, {left} left)", self.at);
        }
        let s = &self.bytes[self.at..self.at + n as usize];
        self.at += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        Ok(self.take(N as u64, what)?.try_into().expect("N bytes"))
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let n = self.u64(what)?;
        let b = self.take(n, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| anyhow!("{what} is not UTF-8"))
    }

    fn value(&mut self, ty: u32, key: &str, depth: usize) -> Result<Value> {
        Ok(match ty {
            0 => Value::U8(self.array::<1>(key)?[0]),
            1 => Value::I8(self.array::<1>(key)?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.array(key)?)),
            3 => Value::I16(i16::from_le_bytes(self.array(key)?)),
            4 => Value::U32(self.u32(key)?),
            5 => Value::I32(i32::from_le_bytes(self.array(key)?)),
            6 => Value::F32(f32::from_le_bytes(self.array(key)?)),
            7 => match self.array::<1>(key)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => bail!("metadata `{key}`: {b} is not a boolean"),
            },
            8 => Value::String(self.string(key)?),
            9 => {
                let (ty, n) = self.array_header(key, depth)?;
                if n > MAX_KEPT {
                    for _ in 0..n {
                        self.skip(ty, key, depth + 1)?;
                    }
                    return Ok(Value::Skipped { len: n });
                }
                let mut v = Vec::new();
                for _ in 0..n {
                    v.push(self.value(ty, key, depth + 1)?);
                }
                Value::Array(v)
            }
            10 => Value::U64(self.u64(key)?),
            11 => Value::I64(i64::from_le_bytes(self.array(key)?)),
            12 => Value::F64(f64::from_le_bytes(self.array(key)?)),
            other => bail!("metadata `{key}`: unknown value type {other}"),
        })
    }
}

impl Cursor<'_> {
    /// An array's element type and length, checked: not nested past [`MAX_DEPTH`], and no more
    /// elements than bytes left (each takes at least one), caught before anything is allocated.
    fn array_header(&mut self, key: &str, depth: usize) -> Result<(u32, u64)> {
        ensure!(depth < MAX_DEPTH, "metadata `{key}`: arrays nested deeper than {MAX_DEPTH}");
        let ty = self.u32(key)?;
        let n = self.u64(key)?;
        let left = (self.bytes.len() - self.at) as u64;
        ensure!(n <= left, "metadata `{key}`: an array of {n} values in {left} bytes");
        Ok((ty, n))
    }

    /// Moves past one value of type `ty` without keeping it.
    fn skip(&mut self, ty: u32, key: &str, depth: usize) -> Result<()> {
        let fixed = match ty {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            10..=12 => 8,
            8 => {
                let n = self.u64(key)?;
                self.take(n, key)?;
                return Ok(());
            }
            9 => {
                let (ty, n) = self.array_header(key, depth)?;
                for _ in 0..n {
                    self.skip(ty, key, depth + 1)?;
                }
                return Ok(());
            }
            other => bail!("metadata `{key}`: unknown value type {other}"),
        };
        self.take(fixed, key)?;
        Ok(())
    }
}

impl GgufFile {
    /// The tables of a whole GGUF file (`bytes` is the file, usually a mapping of it). Errors
    /// name the tensor or key at fault; the caller names the file.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let mut c = Cursor { bytes, at: 0 };
        let magic = c.take(4, "the magic")?;
        ensure!(magic == MAGIC, "not a GGUF file (it does not start with `GGUF`)");
        let version = c.u32("the version")?;
        if version.swap_bytes() == 2 || version.swap_bytes() == 3 {
            bail!("a big-endian GGUF file; only little-endian files are read");
        }
        ensure!(version == 2 || version == 3, "GGUF version {version} (versions 2 and 3 are read)");
        let n_tensors = c.u64("the tensor count")?;
        let n_kv = c.u64("the metadata count")?;
        let mut metadata = Vec::new();
        for i in 0..n_kv {
            let key = c.string(&format!("metadata key {i}"))?;
            let ty = c.u32(&key)?;
            let value = c.value(ty, &key, 0).with_context(|| format!("metadata `{key}`"))?;
            metadata.push((key, value));
        }
        let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
            None => 32,
            Some((_, v)) => match v.as_i64() {
                Some(a) if a > 0 && (a as u64).is_power_of_two() && a <= 1 << 20 => a as u64,
                _ => bail!("metadata `general.alignment` is {v:?}, not a power of two"),
            },
        };
        let mut raw = Vec::new();
        let mut seen = HashMap::new();
        for i in 0..n_tensors {
            let name = c.string(&format!("the name of tensor {i}"))?;
            ensure!(seen.insert(name.clone(), i).is_none(), "tensor `{name}` appears twice");
            let n_dims = c.u32(&name)?;
            ensure!((1..=MAX_DIMS).contains(&n_dims), "tensor `{name}` has {n_dims} dims");
            let mut dims = Vec::new();
            for _ in 0..n_dims {
                let d = c.u64(&name)?;
                ensure!(d <= i64::MAX as u64, "tensor `{name}`: dim {d} is out of range");
                dims.push(d);
            }
            let ty = GgmlType::from_id(c.u32(&name)?).map_err(|e| anyhow!("tensor `{name}`: {e}"))?;
            let offset = c.u64(&name)?;
            raw.push((name, dims, ty, offset));
        }
        let data_start = (c.at as u64).div_ceil(alignment) * alignment;
        let mut tensors = Vec::new();
        for (name, dims, ty, offset) in raw {
            let n = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
            let Some(n) = n.filter(|&n| n <= i64::MAX as u64) else {
                bail!("tensor `{name}`: dims {dims:?} overflow");
            };
            ensure!(
                dims[0].is_multiple_of(ty.block_len() as u64),
                "tensor `{name}`: rows of {} values are not whole {ty} blocks of {}",
                dims[0],
                ty.block_len()
            );
            let size =
                ty.bytes_for(n).ok_or_else(|| anyhow!("tensor `{name}`: {n} values are not whole {ty} blocks"))?;
            ensure!(
                offset.is_multiple_of(alignment),
                "tensor `{name}`: offset {offset} is not a multiple of {alignment}"
            );
            let start = data_start.checked_add(offset);
            let end = start.and_then(|s| s.checked_add(size));
            let (Some(start), Some(end)) = (start, end) else { bail!("tensor `{name}`: offset {offset} overflows") };
            ensure!(
                end <= bytes.len() as u64,
                "tensor `{name}`: its {size} bytes at {start} run past the end of the file ({} bytes; truncated?)",
                bytes.len()
            );
            let dims = dims.into_iter().rev().collect();
            tensors.push(TensorInfo { name, ty, dims, start: start as usize, end: end as usize });
        }
        Ok(Self { version, metadata, tensors })
    }

    /// The metadata value under `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// `tensor`'s shape as the model uses it (outermost first): the shape ComfyUI-GGUF records
    /// under `comfy.gguf.orig_shape.<name>` when it stored the tensor reshaped for its blocks,
    /// else the file's dims. The recorded shape must hold as many values.
    pub fn shape(&self, tensor: &TensorInfo) -> Result<Vec<i64>> {
        let key = format!("comfy.gguf.orig_shape.{}", tensor.name);
        let Some(v) = self.get(&key) else {
            return Ok(tensor.dims.iter().map(|&d| d as i64).collect());
        };
        let dims: Option<Vec<i64>> = match v {
            Value::Array(a) => a.iter().map(|d| d.as_i64().filter(|&d| d >= 0)).collect(),
            _ => None,
        };
        let Some(dims) = dims else { bail!("metadata `{key}` is not a list of dims") };
        let n = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d as u64));
        ensure!(
            n == Some(tensor.len()),
            "metadata `{key}` gives shape {dims:?}, but tensor `{}` holds {} values",
            tensor.name,
            tensor.len()
        );
        Ok(dims)
    }
}
