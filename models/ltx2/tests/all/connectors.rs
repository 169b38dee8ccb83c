//! The text connectors against diffusers' `LTX2TextConnectors` (float32, CPU;
//! tests/fixtures/make_ltx2_fixtures.py): LTX-2.0's per-layer normalisation with learnable
//! registers, and LTX-2.3's per-token normalisation with per-stream projections, gated
//! attention and the padding mask reaching the attention.

use fastvideo_ltx2::Ltx2Connectors;
use tch::{Device, Kind};

use crate::common::{fixture, load, rel};

/// float32 on both sides: summation order only.
#[test]
fn both_connector_layouts_match_diffusers() {
    for layout in ["20", "23"] {
        let c = Ltx2Connectors::load(&fixture(&format!("connectors_{layout}")), Device::Cpu, Kind::Float).unwrap();
        let f = load(&format!("connectors_{layout}.safetensors"));
        let out = c.forward(&f["states"], &f["mask"]).unwrap();
        let (ev, ea) = (rel(&out.video, &f["video"]), rel(&out.audio, &f["audio"]));
        eprintln!("connectors {layout}: video {ev:.2e}, audio {ea:.2e}");
        assert!(ev < 1e-5 && ea < 1e-5, "connectors {layout}: video {ev:.2e}, audio {ea:.2e}");
        assert!(out.mask.equal(&f["video_mask"]), "connectors {layout}: the mask");
    }
}

#[test]
fn a_text_length_the_registers_do_not_divide_is_refused() {
    let c = Ltx2Connectors::load(&fixture("connectors_20"), Device::Cpu, Kind::Float).unwrap();
    let f = load("connectors_20.safetensors");
    let e = c.forward(&f["states"].narrow(1, 0, 6), &f["mask"].narrow(1, 0, 6)).err().unwrap().to_string();
    assert!(e.contains("6 text tokens are not a multiple of the 4 learnable registers"), "{e}");
}
