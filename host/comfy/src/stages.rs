//! The stages a pipeline graph is made of, with the types of what they read and produce: the
//! vocabulary translators write to and the compiler checks against.

/// One stage kind.
#[derive(Debug, Clone, Copy)]
pub struct StageDecl {
    /// Its name in a graph node's `stage`.
    pub name: &'static str,
    /// Parameters that are values of other nodes: (param, type, required).
    pub refs: &'static [(&'static str, &'static str, bool)],
    /// Types of what it produces, by output index.
    pub outputs: &'static [&'static str],
}

macro_rules! stage {
    ($name:literal, [$(($p:literal, $t:literal, $req:literal)),* $(,)?], [$($o:literal),* $(,)?]) => {
        StageDecl { name: $name, refs: &[$(($p, $t, $req)),*], outputs: &[$($o),*] }
    };
}

/// Every stage a graph may use. `value` is a literal (primitive nodes); the compiler folds it
/// into the parameters that read it. `switch` (ComfyUI's `ComfySwitchNode`) is resolved the same
/// way: its value is its `on_true` or `on_false`, as its fixed `switch` says; so is `math`
/// (`ComfyMathExpression`): its float and int results, computed from its literal inputs. Pictures and videos are files in the ComfyUI input folder
/// (`load.image`, `load.video`): the lowering turns the chain from a loader through
/// `image.resize` into a request input, read and checked when the request is made.
pub const STAGES: &[StageDecl] = &[
    stage!("value", [], ["value"]),
    stage!("switch", [], ["value"]),
    stage!("math", [], ["value", "value"]),
    stage!("load.diffusion_model", [], ["model"]),
    stage!("load.text_encoder", [], ["text_encoder"]),
    stage!("load.vae", [], ["vae"]),
    stage!("load.checkpoint", [], ["model", "text_encoder", "vae"]),
    stage!("load.clip_vision", [], ["clip_vision"]),
    stage!("load.image", [], ["images", "mask"]),
    stage!("load.video", [], ["video"]),
    stage!("video.components", [("video", "video", true)], ["images", "audio", "fps"]),
    stage!("image.resize", [("images", "images", true)], ["images"]),
    // `GetImageSize`: width, height and batch size of a picture, known when its file is read.
    stage!("image.size", [("images", "images", true)], ["int", "int", "int"]),
    stage!("encode.text", [("text_encoder", "text_encoder", true)], ["conditioning"]),
    // `ConditioningZeroOut`: the conditioning's embeddings zeroed (a negative that guides nowhere).
    stage!("encode.zero", [("conditioning", "conditioning", true)], ["conditioning"]),
    stage!(
        "encode.clip_vision",
        [("clip_vision", "clip_vision", true), ("images", "images", true)],
        ["clip_vision_output"]
    ),
    stage!("latent.empty", [], ["latent"]),
    // An edit's conditioning: the text with reference pictures (`ReferenceLatent` takes a
    // VAE-encoded one; `TextEncodeQwenImageEdit(Plus)` encodes up to three with the prompt),
    // and how the references are placed (`FluxKontextMultiReferenceLatentMethod`).
    stage!(
        "condition.reference",
        [("conditioning", "conditioning", true), ("latent", "latent", false)],
        ["conditioning"]
    ),
    stage!(
        "encode.text_edit",
        [
            ("text_encoder", "text_encoder", true),
            ("vae", "vae", false),
            ("image1", "images", false),
            ("image2", "images", false),
            ("image3", "images", false)
        ],
        ["conditioning"]
    ),
    stage!("condition.reference_method", [("conditioning", "conditioning", true)], ["conditioning"]),
    stage!(
        "condition.image_to_video",
        [
            ("positive", "conditioning", true),
            ("negative", "conditioning", true),
            ("vae", "vae", true),
            ("clip_vision", "clip_vision_output", false),
            ("clip_vision_end", "clip_vision_output", false),
            ("start_image", "images", false),
            ("end_image", "images", false)
        ],
        ["conditioning", "conditioning", "latent"]
    ),
    stage!("latent.image_to_video", [("vae", "vae", true), ("start_image", "images", true)], ["latent"]),
    stage!("model.shift", [("model", "model", true)], ["model"]),
    // `CFGNorm`: the guided prediction rescaled to the conditional one's norm.
    stage!("model.cfg_norm", [("model", "model", true)], ["model"]),
    // A LoRA on the model (`LoraLoaderModelOnly`), and one that also passes the text encoder
    // (`LoraLoader`'s CLIP output).
    stage!("model.lora_model", [("model", "model", true)], ["model"]),
    stage!(
        "model.lora",
        [("model", "model", true), ("text_encoder", "text_encoder", false)],
        ["model", "text_encoder"]
    ),
    stage!(
        "sample",
        [
            ("model", "model", true),
            ("positive", "conditioning", true),
            ("negative", "conditioning", false),
            ("latent", "latent", true)
        ],
        ["latent"]
    ),
    stage!(
        "guider.cfg",
        [("model", "model", true), ("positive", "conditioning", true), ("negative", "conditioning", false)],
        ["guider"]
    ),
    stage!("schedule", [("model", "model", true)], ["sigmas"]),
    // FLUX.2's schedule, shifted by the picture's size (`Flux2Scheduler`: steps, width, height).
    stage!("schedule.flux2", [], ["sigmas"]),
    stage!("sampler.select", [], ["sampler"]),
    stage!("noise.random", [], ["noise"]),
    stage!(
        "sample.custom",
        [
            ("noise", "noise", true),
            ("guider", "guider", true),
            ("sampler", "sampler", true),
            ("sigmas", "sigmas", true),
            ("latent", "latent", true)
        ],
        ["latent", "latent"]
    ),
    // LTX-2's audio and video in one latent: the empty audio latent (`LTXVEmptyLatentAudio`),
    // the two packed into one and split apart (`LTXVConcatAVLatent`, `LTXVSeparateAVLatent`),
    // the audio VAE and its decode, the latent upsampler between two samplers, the frame rate
    // and keyframe-guide nodes on the conditioning, a picture written into the latent in place
    // (`LTXVImgToVideoInplace`; `bypass` passes the latent through), the picture's
    // compression-like preprocessing, an LLM prompt enhancer (`TextGenerateLTX2Prompt`).
    stage!("load.audio_vae", [], ["audio_vae"]),
    stage!("load.upscale_model", [], ["upscale_model"]),
    stage!("latent.empty_audio", [("audio_vae", "audio_vae", true)], ["latent"]),
    stage!("latent.av_concat", [("video", "latent", true), ("audio", "latent", true)], ["latent"]),
    stage!("latent.av_separate", [("latent", "latent", true)], ["latent", "latent"]),
    stage!(
        "latent.upsample",
        [("latent", "latent", true), ("upscale_model", "upscale_model", true), ("vae", "vae", true)],
        ["latent"]
    ),
    stage!(
        "latent.image_inplace",
        [("vae", "vae", true), ("images", "images", false), ("latent", "latent", true)],
        ["latent"]
    ),
    stage!(
        "condition.frame_rate",
        [("positive", "conditioning", true), ("negative", "conditioning", true)],
        ["conditioning", "conditioning"]
    ),
    stage!(
        "condition.crop_guides",
        [("positive", "conditioning", true), ("negative", "conditioning", true), ("latent", "latent", true)],
        ["conditioning", "conditioning", "latent"]
    ),
    stage!("image.preprocess", [("images", "images", true)], ["images"]),
    stage!("image.empty", [], ["images"]),
    stage!("text.generate", [("text_encoder", "text_encoder", true)], ["value"]),
    // ManualSigmas: the noise levels as the workflow writes them; LTXVScheduler: LTX-2's
    // shifted levels for a step count and the latent's size.
    stage!("schedule.manual", [], ["sigmas"]),
    stage!("schedule.ltxv", [("latent", "latent", false)], ["sigmas"]),
    stage!("decode.audio", [("latent", "latent", true), ("audio_vae", "audio_vae", true)], ["audio"]),
    // PreviewAny: shows a value in the UI; nothing to run.
    stage!("output.preview", [], []),
    stage!("decode.vae", [("latent", "latent", true), ("vae", "vae", true)], ["images"]),
    stage!("encode.vae", [("images", "images", true), ("vae", "vae", true)], ["latent"]),
    stage!("video.create", [("images", "images", true), ("audio", "audio", false)], ["video"]),
    stage!("output.video", [("video", "video", true)], []),
    stage!("output.image", [("images", "images", true)], []),
];

/// The declaration of `stage`.
pub fn stage(name: &str) -> Option<&'static StageDecl> {
    STAGES.iter().find(|s| s.name == name)
}
