//! ggml tensor types: the ids GGUF stores, and each block format's geometry.

use std::fmt;

/// A tensor type this runtime reads. Values are ggml's `ggml_type` ids.
// ggml's own names (`Q4_K`), which is how users and file names spell them.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4_K,
    Q5_K,
    Q6_K,
}

/// Types ggml defines that no published video-model file we know of uses: named in the error.
const KNOWN_UNREAD: &[(u32, &str)] = &[
    (9, "Q8_1"),
    (10, "Q2_K"),
    (11, "Q3_K"),
    (15, "Q8_K"),
    (16, "IQ2_XXS"),
    (17, "IQ2_XS"),
    (18, "IQ3_XXS"),
    (19, "IQ1_S"),
    (20, "IQ4_NL"),
    (21, "IQ3_S"),
    (22, "IQ2_S"),
    (23, "IQ4_XS"),
    (24, "I8"),
    (25, "I16"),
    (26, "I32"),
    (27, "I64"),
    (28, "F64"),
    (29, "IQ1_M"),
    (34, "TQ1_0"),
    (35, "TQ2_0"),
    (39, "MXFP4"),
];

impl GgmlType {
    pub const ALL: [GgmlType; 11] = [
        Self::F32,
        Self::F16,
        Self::BF16,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q4_K,
        Self::Q5_K,
        Self::Q6_K,
    ];

    /// The type with ggml id `id`; the error names the type when ggml defines it.
    pub fn from_id(id: u32) -> Result<Self, String> {
        if let Some(t) = Self::ALL.into_iter().find(|t| t.id() == id) {
            return Ok(t);
        }
        match KNOWN_UNREAD.iter().find(|(i, _)| *i == id) {
            Some((_, name)) => Err(format!("tensor type {name} (ggml id {id}) is not supported")),
            None => Err(format!("unknown tensor type id {id}")),
        }
    }

    /// ggml's id.
    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q4_K => 12,
            Self::Q5_K => 13,
            Self::Q6_K => 14,
            Self::BF16 => 30,
        }
    }

    /// Values per block (1 for the plain float types).
    pub fn block_len(self) -> usize {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 | Self::Q8_0 => 32,
            Self::Q4_K | Self::Q5_K | Self::Q6_K => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q8_0 => 34,
            Self::Q4_K => 144,
            Self::Q5_K => 176,
            Self::Q6_K => 210,
        }
    }

    /// Byte offsets of a block's f16 scales (the scale, then the min where the format has one);
    /// none for the plain float types.
    pub fn scale_offsets(self) -> &'static [usize] {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => &[],
            Self::Q4_0 | Self::Q5_0 | Self::Q8_0 => &[0],
            Self::Q4_1 | Self::Q5_1 | Self::Q4_K | Self::Q5_K => &[0, 2],
            Self::Q6_K => &[208],
        }
    }

    /// Whether values are stored in blocks with scales (lossy against the float weights the
    /// file was made from), not as plain floats.
    pub fn is_quantized(self) -> bool {
        self.block_len() > 1
    }

    /// Bytes `n` values take, or `None` when `n` is not a whole number of blocks.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        let len = self.block_len() as u64;
        n.is_multiple_of(len).then(|| n / len).and_then(|b| b.checked_mul(self.block_bytes() as u64))
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::BF16 => "BF16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q4_K => "Q4_K",
            Self::Q5_K => "Q5_K",
            Self::Q6_K => "Q6_K",
        };
        f.write_str(name)
    }
}
