//! The reader and the block decoders against gguf-py (tests/fixtures/make_gguf_fixtures.py),
//! and damaged files refused with the tensor named.

use std::path::PathBuf;

use fastvideo_gguf::{dequantize, first_bad_scale, GgmlType, GgufFile, Value};
use safetensors::SafeTensors;

fn fixture(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/gguf").join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn decode(file: &GgufFile, bytes: &[u8], name: &str) -> Vec<f32> {
    let t = file.tensors.iter().find(|t| t.name == name).unwrap_or_else(|| panic!("{name}"));
    let mut out = vec![0.0; t.len() as usize];
    dequantize(t.ty, &bytes[t.start..t.end], &mut out).unwrap();
    out
}

/// Every type decodes as gguf-py decodes it, in float32. Tolerance: 1 ulp of the largest value
/// (gguf-py forms `d · scale` and `· q` in numpy's order; the products are the same up to one
/// rounding).
#[test]
fn every_type_decodes_as_gguf_py_does() {
    let bytes = fixture("types.gguf");
    let file = GgufFile::parse(&bytes).unwrap();
    assert_eq!(file.get("general.architecture").and_then(Value::as_str), Some("wan"));
    let reference = fixture("types.safetensors");
    let reference = SafeTensors::deserialize(&reference).unwrap();
    assert_eq!(file.tensors.len(), GgmlType::ALL.len());
    for ty in GgmlType::ALL {
        let name = ty.to_string();
        let t = file.tensors.iter().find(|t| t.name == name).unwrap();
        assert_eq!((t.ty, t.dims.as_slice()), (ty, &[4u64, 512][..]), "{name}");
        let ours = decode(&file, &bytes, &name);
        let theirs = reference.tensor(&name).unwrap();
        let theirs: Vec<f32> =
            theirs.data().chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect();
        let max = theirs.iter().fold(0f32, |a, v| a.max(v.abs()));
        let err = ours.iter().zip(&theirs).fold(0f32, |a, (x, y)| a.max((x - y).abs()));
        assert!(err <= max * f32::EPSILON, "{name}: max error {err} (largest value {max})");
        assert!(ours.iter().any(|&v| v != 0.0), "{name} decoded to zeros");
    }
}

/// The Wan file as ComfyUI-GGUF lays it out: original keys, 5-D patch embedding, rows of 256
/// with the model's shape in the metadata.
#[test]
fn comfy_wan_layout_is_read() {
    let bytes = fixture("wan_mixed.gguf");
    let file = GgufFile::parse(&bytes).unwrap();
    assert_eq!(file.version, 3);
    let t = |n: &str| file.tensors.iter().find(|t| t.name == n).unwrap().clone();
    assert_eq!(file.shape(&t("patch_embedding.weight")).unwrap(), [128, 4, 1, 2, 2]);
    let q = t("blocks.0.self_attn.q.weight");
    assert_eq!(q.dims, [64, 256], "stored as rows of 256");
    assert_eq!(file.shape(&q).unwrap(), [128, 128], "the model's shape from comfy.gguf.orig_shape");
    assert_eq!(file.shape(&t("blocks.0.modulation")).unwrap(), [1, 6, 128]);
    let types: std::collections::BTreeSet<String> = file.tensors.iter().map(|t| t.ty.to_string()).collect();
    assert!(types.len() >= 10, "{types:?}");
}

/// Offsets into the header of the fixture, for damaging it on purpose: the first tensor-info
/// record after the metadata.
fn first_tensor_record(bytes: &[u8], file: &GgufFile) -> usize {
    let name = file.tensors[0].name.as_bytes();
    let mut at = 24;
    while &bytes[at + 8..at + 8 + name.len()] != name || bytes[at..at + 8] != (name.len() as u64).to_le_bytes() {
        at += 1;
    }
    at
}

#[test]
fn damaged_files_are_refused_naming_the_tensor() {
    let bytes = fixture("wan_mixed.gguf");
    let file = GgufFile::parse(&bytes).unwrap();
    let last = file.tensors.iter().max_by_key(|t| t.end).unwrap();
    let err = GgufFile::parse(&bytes[..bytes.len() - 10]).unwrap_err().to_string();
    assert!(err.contains(&format!("`{}`", last.name)) && err.contains("truncated"), "{err}");

    let first = &file.tensors[0];
    let rec = first_tensor_record(&bytes, &file);
    let dims_at = rec + 8 + first.name.len() + 4;
    let type_at = dims_at + 8 * first.dims.len();

    let mut unknown = bytes.clone();
    unknown[type_at..type_at + 4].copy_from_slice(&99u32.to_le_bytes());
    let err = GgufFile::parse(&unknown).unwrap_err().to_string();
    assert_eq!(err, format!("tensor `{}`: unknown tensor type id {}", first.name, 99));

    let mut q3k = bytes.clone();
    q3k[type_at..type_at + 4].copy_from_slice(&11u32.to_le_bytes());
    let err = GgufFile::parse(&q3k).unwrap_err().to_string();
    assert!(err.contains("Q3_K") && err.contains(&first.name), "{err}");

    let mut huge = bytes.clone();
    huge[dims_at..dims_at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let err = GgufFile::parse(&huge).unwrap_err().to_string();
    assert!(err.contains(&first.name), "{err}");

    assert!(GgufFile::parse(b"GGUF\x01\0\0\0").unwrap_err().to_string().contains("version 1"));
    assert!(GgufFile::parse(b"PK\x03\x04").unwrap_err().to_string().contains("not a GGUF file"));
}

#[test]
fn a_nan_scale_is_found() {
    let bytes = fixture("types.gguf");
    let file = GgufFile::parse(&bytes).unwrap();
    for t in file.tensors.iter().filter(|t| t.ty.is_quantized()) {
        let mut b = bytes[t.start..t.end].to_vec();
        assert_eq!(first_bad_scale(t.ty, &b), None, "{}", t.name);
        // The third block's scale: NaN in f16 (0x7e00). Q6_K keeps its `d` last.
        let at = 2 * t.ty.block_bytes() + if t.ty == GgmlType::Q6_K { 208 } else { 0 };
        b[at..at + 2].copy_from_slice(&0x7e00u16.to_le_bytes());
        assert_eq!(first_bad_scale(t.ty, &b), Some(2), "{}", t.name);
    }
}

#[test]
fn sizes_that_are_not_whole_blocks_are_refused() {
    let mut out = vec![0.0; 33];
    assert!(dequantize(GgmlType::Q8_0, &[0; 34], &mut out).is_err());
    assert_eq!(GgmlType::Q4_K.bytes_for(512), Some(288));
    assert_eq!(GgmlType::Q8_0.bytes_for(48), None);
}
