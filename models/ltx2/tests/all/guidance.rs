//! One step's guidance against `LTX2Pipeline.__call__`'s combination (its own
//! `convert_velocity_to_x0`, `rescale_noise_cfg` and `convert_x0_to_velocity`;
//! tests/fixtures/make_ltx2_fixtures.py): every pass at once, CFG alone, CFG with the rescale.

use fastvideo_ltx2::guidance::{guided_velocity, Passes, Scales};

use crate::common::{load, rel};

/// float32 on both sides: the same operations in the same order (1e-6 leaves room for the
/// standard deviation's summation order).
#[test]
fn guidance_combines_as_the_pipeline_does() {
    let f = load("guidance.safetensors");
    let all = Passes {
        cond: &f["cond"],
        uncond: Some(&f["uncond"]),
        perturbed: Some(&f["perturbed"]),
        isolated: Some(&f["isolated"]),
    };
    let cases = [
        ("all", all, Scales { cfg: 3.0, stg: 1.0, modality: 3.0, rescale: 0.7 }),
        (
            "cfg_only",
            Passes { cond: &f["cond"], uncond: Some(&f["uncond"]), perturbed: None, isolated: None },
            Scales { cfg: 4.0, stg: 0.0, modality: 1.0, rescale: 0.0 },
        ),
        (
            "cfg_rescale",
            Passes { cond: &f["cond"], uncond: Some(&f["uncond"]), perturbed: None, isolated: None },
            Scales { cfg: 2.0, stg: 0.0, modality: 1.0, rescale: 0.5 },
        ),
    ];
    for (name, passes, scales) in cases {
        let v = guided_velocity(&f["x"], 0.7, &passes, &scales);
        let e = rel(&v, &f[name]);
        assert!(e < 1e-6, "{name}: {e:.2e}");
    }
}
