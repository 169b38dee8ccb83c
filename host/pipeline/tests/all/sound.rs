//! The driver's side of the audio plane: a waveform a stage leaves under `AUDIO` becomes the
//! `audio` artifact when the request resolved `generate_sound`, is dropped when it did not, and
//! a run that resolved sound but made none fails instead of returning a silent clip.

use std::sync::Arc;

use anyhow::Result;
use fastvideo_pipeline::{
    CancelToken, LoopStage, LoopState, Node, NodeCtx, PipelineRun, PipelineSpec, StepResult, Value, Values, AUDIO,
};
use fastvideo_request::{AudioArtifact, AudioLimits, ModelLimits, OmniRequest, TaskType};
use tch::{Device, Tensor};

/// A loop that ends by writing the final latents and, when `sound`, a short waveform.
struct Decode {
    sound: bool,
}

impl LoopStage for Decode {
    fn init(&self, ctx: &NodeCtx, _: &mut Values) -> Result<LoopState> {
        Ok(LoopState { step: 0, total_steps: ctx.request.steps, inner: Box::new(()) })
    }
    fn step(&self, _: &NodeCtx, _: &mut LoopState) -> Result<StepResult> {
        Ok(StepResult { forwards: 1, ..Default::default() })
    }
    fn finalize(&self, _: &NodeCtx, _: LoopState, values: &mut Values) -> Result<()> {
        values.insert("latents", Value::Tensor(Tensor::from(1f32)));
        if self.sound {
            let audio = AudioArtifact { sample_rate: 48_000, channels: 2, samples: vec![0.25; 96] };
            values.insert(AUDIO, Value::Audio(audio));
        }
        Ok(())
    }
}

fn run(sound: bool, generate_sound: Option<bool>) -> Result<fastvideo_request::OmniOutput> {
    let nodes = vec![Node::looped("decode", Arc::new(Decode { sound }), &[], &["latents", AUDIO])];
    let spec = PipelineSpec::new("toy", vec![TaskType::T2v], nodes, &[], "latents").unwrap();
    let limits = ModelLimits {
        audio: Some(AudioLimits { sample_rate: 48_000, channels: 2 }),
        action: None,
        tasks: vec![TaskType::T2v],
        ..ModelLimits::example()
    };
    let mut req = OmniRequest::text_to_video("sound-1", "a bell");
    req.diffusion.num_inference_steps = Some(2);
    req.outputs.generate_sound = generate_sound;
    let req = req.resolve(&limits, || 1).unwrap();
    let mut run = PipelineRun::new(Arc::new(spec), req, Device::Cpu, Values::default(), CancelToken::default());
    run.run_to_end(&mut |_| {})?;
    run.finish(&mut |_| {})
}

#[test]
fn the_waveform_becomes_the_audio_artifact_when_sound_was_resolved() {
    let out = run(true, None).unwrap();
    let audio = out.audio().expect("an audio artifact");
    assert_eq!((audio.sample_rate, audio.channels, audio.frames()), (48_000, 2, 48));
    assert!(run(true, Some(false)).unwrap().audio().is_none(), "not asked for, not returned");
    let e = run(false, None).unwrap_err().to_string();
    assert!(e.contains("made no sound"), "{e}");
}
