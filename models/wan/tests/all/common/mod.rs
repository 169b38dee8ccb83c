//! Helpers shared by the model tests: copies of model folders to modify.

use std::path::Path;

/// Copies the folder `from` (recursively) to `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.path().is_dir() {
            copy_dir(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), dst).unwrap();
        }
    }
}

/// Runs `spec` on `req` from `init` values to its end: the output, and how many progress events
/// the run sent.
pub fn run_pipeline(
    spec: std::sync::Arc<fastvideo_pipeline::PipelineSpec>,
    req: fastvideo_request::ResolvedRequest,
    init: fastvideo_pipeline::Values,
) -> (fastvideo_request::OmniOutput, u32) {
    let mut run = fastvideo_pipeline::PipelineRun::new(spec, req, tch::Device::Cpu, init, Default::default());
    let mut progress = 0;
    run.run_to_end(&mut |e| progress += matches!(e, fastvideo_request::OmniEvent::Progress { .. }) as u32).unwrap();
    (run.finish(&mut |_| {}).unwrap(), progress)
}

/// Checks an output with `return_latents` against diffusers' final latents (relative error
/// below 1e-4) and its RGB8 video against diffusers' frames `[1, F, C, H, W]` in [0, 1] (within
/// half a quantization step plus float tolerance). `name` labels the printed errors.
pub fn assert_matches_reference(
    name: &str,
    out: &fastvideo_request::OmniOutput,
    latents: &tch::Tensor,
    video: &tch::Tensor,
) {
    use tch::{Kind, Tensor};
    let Some(fastvideo_request::Artifact::Latents(l)) = out.artifacts.get("latents") else {
        panic!("{name}: latents returned")
    };
    let ours = Tensor::from_slice(&l.data).view(l.shape.as_slice());
    assert_eq!(ours.size(), latents.size(), "{name}: latent shape");
    let e = (&ours - latents).abs().max().double_value(&[]) / latents.abs().max().double_value(&[]).max(1e-12);
    eprintln!("{name} pipeline latents: relative error {e:.3e}");
    assert!(e < 1e-4, "{name} pipeline latents relative error {e}"); // tolerance 1e-4
    let v = out.video().expect("video artifact");
    let (f, h, w) = (v.num_frames as i64, v.height as i64, v.width as i64);
    let ours = Tensor::from_slice(&v.rgb).view([f, h, w, 3]).to_kind(Kind::Float) / 255.0;
    let reference = video.squeeze_dim(0).permute([0, 2, 3, 1]);
    let diff = (ours - reference).abs().max().double_value(&[]);
    eprintln!("{name} pipeline video: max abs error {diff:.3e}");
    assert!(diff <= 0.5 / 255.0 + 1e-4, "{name} pipeline video max abs error {diff}");
}

#[repr(transparent)]
struct SendTensor(tch::Tensor);
// SAFETY: fixtures are read-only after loading.
unsafe impl Sync for SendTensor {}
unsafe impl Send for SendTensor {}

/// Tensor `name` of `tests/fixtures/<file>`, each file read once per test binary.
pub fn fixture(file: &str, name: &str) -> &'static tch::Tensor {
    type Files = std::collections::HashMap<String, &'static std::collections::HashMap<String, SendTensor>>;
    static FILES: std::sync::OnceLock<std::sync::Mutex<Files>> = std::sync::OnceLock::new();
    let mut files = FILES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    let map = *files.entry(file.to_string()).or_insert_with(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(file);
        let t = tch::Tensor::read_safetensors(&path).expect("fixture readable");
        Box::leak(Box::new(t.into_iter().map(|(k, v)| (k, SendTensor(v))).collect()))
    });
    &map.get(name).unwrap_or_else(|| panic!("fixture `{name}` missing in {file}")).0
}
