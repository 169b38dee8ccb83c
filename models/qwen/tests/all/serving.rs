//! The language model as a served model: its limits declare no frame or size rule, so a text
//! request resolves without either and one asking for frames or a size is refused by field.

use std::path::Path;

use fastvideo_qwen::serving::chat_limits;
use fastvideo_qwen::LanguageModel;
use fastvideo_request::{OmniRequest, TaskType};

#[test]
fn a_language_models_limits_carry_no_video_or_picture_fields() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/tiny-qwen3");
    let lm = LanguageModel::load(&dir, tch::Device::Cpu, tch::Kind::Float).unwrap();
    let limits = chat_limits(&lm);
    assert_eq!((limits.video, limits.picture), (None, None));
    let wire = serde_json::to_value(&limits).unwrap();
    for key in ["frame_multiple", "max_frames", "spatial_multiple", "max_side"] {
        assert!(wire.get(key).is_none(), "{key} in {wire}");
    }
    let mut r = OmniRequest::text_to_video("chat-1", "hello");
    r.task = TaskType::Text;
    let resolved = r.resolve(&limits, || 1).unwrap();
    assert_eq!((resolved.num_frames, resolved.height, resolved.width), (0, 0, 0));
    r.diffusion.num_frames = Some(5);
    let e = r.resolve(&limits, || 1).unwrap_err();
    assert_eq!(e.field, "diffusion.num_frames", "{e}");
    r.diffusion.num_frames = None;
    r.diffusion.height = Some(16);
    assert_eq!(r.resolve(&limits, || 1).unwrap_err().field, "diffusion.height");
}
