//! GGUF files as checkpoints: tensors in plain float types read like safetensors ones; tensors
//! in ggml's block formats decode to float32 where a model asks for a dense tensor, and a
//! linear's weight stays in its blocks ([`Weights::get_linear`]), dequantized per layer inside
//! the forward (`fastvideo_layers::Linear`).

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context, Result};
use fastvideo_gguf::{first_bad_scale, GgmlType, GgufFile};
use memmap2::Mmap;
use tch::{Kind, Tensor};

use super::{forget_pages, mapped, Entry, Source, Weights};

/// Whether `file` starts with GGUF's magic.
pub(super) fn is_gguf(file: &Path) -> Result<bool> {
    let mut head = [0u8; 4];
    let mut f = std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
    Ok(f.read(&mut head).with_context(|| format!("reading {}", file.display()))? == 4 && &head == b"GGUF")
}

/// Maps a GGUF file and indexes its tensors under the file's names, checking the whole file
/// first: the tables, every tensor's range, and every block's scale (a NaN scale would turn a
/// block into NaNs on the device).
pub(super) fn map(file: &Path, entries: &mut HashMap<String, Entry>) -> Result<Mmap> {
    let f = std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
    // SAFETY: as for safetensors files (`map_file`): only read.
    let map = unsafe { Mmap::map(&f) }.with_context(|| format!("mapping {}", file.display()))?;
    let parsed = GgufFile::parse(&map).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    // (`general.architecture` is not checked: the family's names place every key or refuse it.)
    for t in &parsed.tensors {
        let shape = parsed.shape(t).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        let bytes = &map[t.start..t.end];
        if let Some(block) = first_bad_scale(t.ty, bytes) {
            bail!("{}: tensor `{}` ({}) has a NaN or infinite scale in block {block}", file.display(), t.name, t.ty);
        }
        let (kind, ggml) = match t.ty {
            GgmlType::F32 => (Kind::Float, None),
            GgmlType::F16 => (Kind::Half, None),
            GgmlType::BF16 => (Kind::BFloat16, None),
            q => (Kind::Float, Some(q)),
        };
        let entry = Entry { file: 0, kind, shape, start: t.start, end: t.end, stored: None, ggml };
        entries.insert(t.name.clone(), entry);
    }
    // The scan read every page: drop them from this process (the page cache may keep them).
    // SAFETY: a read-only file mapping; DONTNEED only forgets pages a later read faults back in.
    let _ = unsafe { map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
    Ok(map)
}

/// Decodes ggml blocks to a float32 CPU tensor of `shape`.
pub(super) fn decode(ty: GgmlType, bytes: &[u8], shape: &[i64]) -> Tensor {
    let mut out = vec![0f32; shape.iter().product::<i64>() as usize];
    fastvideo_gguf::dequantize(ty, bytes, &mut out).expect("sizes checked when mapped");
    Tensor::from_slice(&out).reshape(shape)
}

/// Random blocks of `ty` for an `[out, in]` weight (`None` when rows are not whole blocks): random
/// quants, every scale `1 / (64 √in)` (about `random`'s spread for 8-bit quants), every min 0.
fn random_blocks(ty: GgmlType, shape: &[i64], seed: u64, key: &str, device: tch::Device) -> Option<Tensor> {
    let [out, inp] = shape else { return None };
    if !ty.is_quantized() || inp % ty.block_len() as i64 != 0 {
        return None;
    }
    let blocks = out * inp / ty.block_len() as i64;
    let key_seed = u64::from_le_bytes(blake3::hash(key.as_bytes()).as_bytes()[..8].try_into().unwrap());
    tch::manual_seed((seed ^ key_seed) as i64 & i64::MAX);
    let b = Tensor::randint_low(0, 256, [blocks, ty.block_bytes() as i64], (Kind::Uint8, device));
    let scale = half::f16::from_f32(1.0 / (64.0 * (*inp as f32).sqrt())).to_bits().to_le_bytes();
    for (i, &at) in ty.scale_offsets().iter().enumerate() {
        let v = if i == 0 { scale } else { [0, 0] };
        for (j, byte) in v.into_iter().enumerate() {
            let _ = b.narrow(1, (at + j) as i64, 1).fill_(i64::from(byte));
        }
    }
    Some(b.reshape([-1]))
}

/// A linear's `[out, in]` weight as a GGUF file stores it: ggml blocks of `ty`, as bytes on the
/// device (1-D `uint8`), rows in order.
pub struct GgmlWeight {
    /// The block format.
    pub ty: GgmlType,
    /// The blocks, 1-D `uint8`.
    pub bytes: Tensor,
    /// `[out, in]`.
    pub shape: [i64; 2],
}

/// A linear's weight as [`Weights::get_linear`] gives it.
pub enum LinearWeight {
    /// In the compute dtype.
    Dense(Tensor),
    /// Still in ggml's blocks.
    Ggml(GgmlWeight),
    /// An FP8 checkpoint's e4m3 values and their float32 scale per output channel (`[out]`),
    /// kept for the FP8 GEMM ([`Weights::keep_fp8`]).
    Fp8 {
        /// `[out, in]` e4m3.
        values: Tensor,
        /// `[out]` float32.
        scale: Tensor,
    },
}

impl Weights {
    /// A linear's `[out, in]` weight: kept in its ggml blocks when the checkpoint stores it so
    /// (a GGUF file), else as [`get_linear_weight`](Self::get_linear_weight) gives it.
    pub fn get_linear(&self, shape: &[i64]) -> Result<LinearWeight> {
        let key = self.key("weight");
        let e4m3 = matches!(self.stored("weight"), Some((Kind::Float8e4m3fn, _)));
        let keep = self.store.keep_fp8.borrow().as_ref().is_some_and(|k| k(&key));
        if e4m3 && keep && shape.len() == 2 && self.store.deferred.get().is_none() {
            let values = self.with_kind(Kind::Float8e4m3fn).get("weight", shape)?;
            let scale = self.fp8_scale(shape[0])?.expand([shape[0], 1], false).reshape([-1]).to_device(self.device);
            self.store.kept_fp8.set(self.store.kept_fp8.get() + 1);
            return Ok(LinearWeight::Fp8 { values, scale });
        }
        if let Source::Random { seed, ggml: Some(ty) } = self.store.source {
            if let Some(bytes) = random_blocks(ty, shape, seed, &key, self.device) {
                self.store.used.borrow_mut().insert(key);
                return Ok(LinearWeight::Ggml(GgmlWeight { ty, bytes, shape: [shape[0], shape[1]] }));
            }
        }
        let Source::Mapped { maps, entries } = &self.store.source else {
            return self.get_linear_weight(shape).map(LinearWeight::Dense);
        };
        let Some(ty) = entries.get(&key).and_then(|e| e.ggml) else {
            return self.get_linear_weight(shape).map(LinearWeight::Dense);
        };
        if shape.len() != 2 || self.store.deferred.get().is_some() {
            return self.get_linear_weight(shape).map(LinearWeight::Dense);
        }
        let (bytes, e) = mapped(maps, entries, &self.store.origin.display(), &key, shape)?;
        let t = Tensor::from_slice(bytes).to_device(self.device);
        forget_pages(&maps[e.file].1, e);
        self.store.used.borrow_mut().insert(key);
        Ok(LinearWeight::Ggml(GgmlWeight { ty, bytes: t, shape: [shape[0], shape[1]] }))
    }

    /// From now on, linear weights an FP8 checkpoint stores in e4m3 stay FP8 with their scale
    /// ([`LinearWeight::Fp8`]), for the FP8 GEMM, instead of being dequantized, where `which`
    /// accepts the weight's key: where the precision preset runs FP8 linears (`--fp8-linears`,
    /// `fast`), in the layers its recipe quantizes.
    pub fn keep_fp8(&self, which: super::KeepFp8) {
        *self.store.keep_fp8.borrow_mut() = Some(which);
    }

    /// How many FP8 weights stayed FP8 ([`keep_fp8`](Self::keep_fp8)).
    pub fn kept_fp8_count(&self) -> usize {
        self.store.kept_fp8.get()
    }

    /// How many of the checkpoint's linear weights are stored in FP8 (a lossy format of the
    /// file's own).
    pub fn fp8_count(&self) -> usize {
        match &self.store.source {
            Source::Mapped { entries, .. } => {
                let fp8 = |e: &&Entry| matches!(e.kind, Kind::Float8e4m3fn | Kind::Float8e5m2);
                // Not ComfyUI's empty `scaled_fp8` marker.
                entries.values().filter(fp8).filter(|e| e.end > e.start).count()
            }
            _ => 0,
        }
    }

    /// How many of the checkpoint's tensors each ggml block format holds (empty unless it is
    /// a GGUF file with quantized tensors): what a load report names as lossy.
    pub fn ggml_types(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        if let Source::Mapped { entries, .. } = &self.store.source {
            for ty in entries.values().filter_map(|e| e.ggml) {
                *counts.entry(ty.to_string()).or_default() += 1;
            }
        }
        counts
    }
}
