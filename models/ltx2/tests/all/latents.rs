//! Latent layout and scaling against `LTX2Pipeline`'s static helpers
//! (tests/fixtures/make_ltx2_fixtures.py): packing, normalising, the noised blend, unpacking.

use fastvideo_ltx2::latents::{
    noised, normalize_audio, normalize_video, pack_audio, pack_video, unpack_audio, unpack_video,
};

use crate::common::{load, rel};

/// float32, the same operations: 1e-6.
#[test]
fn latents_are_laid_out_and_scaled_as_the_pipeline_does() {
    let f = load("latents.safetensors");
    let pv = pack_video(&normalize_video(&f["video"], &f["video_mean"], &f["video_std"], 0.9));
    assert!(rel(&pv, &f["packed_video"]) < 1e-6);
    let pa = normalize_audio(&pack_audio(&f["audio"]), &f["audio_mean"], &f["audio_std"]);
    assert!(rel(&pa, &f["packed_audio"]) < 1e-6);
    assert!(rel(&noised(&pv, &f["noise"], 0.3), &f["noised_video"]) < 1e-6);
    assert!(unpack_video(&f["packed_video"], [3, 2, 3]).equal(&f["unpacked_video"]));
    assert!(unpack_audio(&f["packed_audio"], 4).equal(&f["unpacked_audio"]));
}
