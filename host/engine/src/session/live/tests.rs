//! Live sessions as pipeline runs, on a stand-in world model.

use fastvideo_pipeline::{
    LoopStage, LoopState, Node, NodeCtx, Observed, Observer, ObserverState, PipelineSpec, PluginMeter, StepCtx,
    StepResult,
};
use fastvideo_request::{Defaults, ModelLimits, OmniRequest, PictureLimits, SamplerKind, TaskType};

use super::*;
use crate::session::SessionRequest;

/// A session loop that makes a one-frame chunk every second step, echoing the last action's id.
struct Toy;
struct ToyState {
    inbox: ActionInbox,
    action: u64,
    chunks: u64,
}

impl LoopStage for Toy {
    fn init(&self, _: &NodeCtx, values: &mut Values) -> anyhow::Result<LoopState> {
        let inbox = values.inbox(ACTIONS)?.clone();
        Ok(LoopState { step: 0, total_steps: u32::MAX, inner: Box::new(ToyState { inbox, action: 0, chunks: 0 }) })
    }
    fn step(&self, ctx: &NodeCtx, state: &mut LoopState) -> anyhow::Result<StepResult> {
        let odd = state.step % 2 == 1;
        let s: &mut ToyState = state.get_mut()?;
        if s.inbox.is_closed() {
            return Ok(StepResult { done: true, ..Default::default() });
        }
        if let Some(a) = s.inbox.take().last() {
            s.action = a.id.unwrap_or(0);
        }
        let mut r = StepResult::default();
        if odd {
            let video =
                fastvideo_request::VideoArtifact { fps: 16, num_frames: 1, height: 1, width: 1, rgb: vec![0; 3] };
            r.emit.push(OmniEvent::Chunk {
                request_id: ctx.request.request_id.clone(),
                index: s.chunks,
                first_frame: s.chunks,
                action_id: s.action,
                video,
            });
            s.chunks += 1;
        }
        Ok(r)
    }
    fn finalize(&self, _: &NodeCtx, _: LoopState, values: &mut Values) -> anyhow::Result<()> {
        values.insert("chunks", Value::Tensor(tch::Tensor::from(0i64)));
        Ok(())
    }
    fn step_ctx<'a>(&self, ctx: &NodeCtx<'a>, state: &LoopState) -> Option<StepCtx<'a>> {
        Some(StepCtx {
            request: ctx.request,
            step_index: state.step % 2,
            num_steps: 2,
            timestep: 0.0,
            sigma: 0.0,
            sigma_next: 0.0,
            expert: 0,
            guidance_scale: ctx.request.guidance_scale,
        })
    }
}

/// Counts the steps of its own session and reports the count when the session ends.
struct StepCounter;
struct Count(u32);
impl Observer for StepCounter {
    fn init(&self, _: &ResolvedRequest, _: &PluginMeter) -> anyhow::Result<Box<dyn ObserverState>> {
        Ok(Box::new(Count(0)))
    }
}
impl ObserverState for Count {
    fn on_event(
        &mut self,
        event: Observed,
        _: Option<&tch::Tensor>,
        emit: &mut dyn FnMut(OmniEvent),
    ) -> anyhow::Result<()> {
        match event {
            Observed::StepEnd(ctx) => {
                self.0 += 1;
                emit(OmniEvent::Plugin {
                    request_id: ctx.request.request_id.clone(),
                    plugin: "counter".into(),
                    name: "step".into(),
                    payload: self.0.into(),
                });
            }
            Observed::RequestEnd(outcome) => emit(OmniEvent::Plugin {
                request_id: String::new(),
                plugin: "counter".into(),
                name: outcome.into(),
                payload: self.0.into(),
            }),
            _ => {}
        }
        Ok(())
    }
}

struct Model(Arc<PipelineSpec>);

impl SessionModel for Model {
    fn id(&self) -> &str {
        "m"
    }
    fn actions(&self) -> Vec<String> {
        vec!["none".into()]
    }
    fn fps(&self) -> u32 {
        16
    }
    fn frames_per_chunk(&self) -> u32 {
        4
    }
    fn frame_size(&self) -> (u32, u32) {
        (8, 8)
    }
    fn units_per_chunk(&self) -> u32 {
        2
    }
    fn pipeline(&self) -> Arc<PipelineSpec> {
        self.0.clone()
    }
    fn request(&self, id: &str, req: &SessionRequest) -> Result<ResolvedRequest, RequestError> {
        let limits = ModelLimits {
            family: "toy".into(),
            tasks: vec![TaskType::World],
            image_roles: Vec::new(),
            video: None,
            picture: Some(PictureLimits { spatial_multiple: 1, max_side: 8 }),
            audio: None,
            action: None,
            references: None,
            max_steps: 2,
            defaults: Defaults {
                steps: 2,
                guidance_scale: 1.0,
                shift: 1.0,
                height: 8,
                width: 8,
                num_frames: 1,
                fps: 16,
                sampler: SamplerKind::Euler,
                negative_prompt: String::new(),
                timesteps: None,
                knobs: Default::default(),
            },
        };
        let mut r = OmniRequest::text_to_video(id, "toy");
        r.task = TaskType::World;
        r.resolve(&limits, || req.seed)
    }
}

fn sessions() -> (LiveSessions, Arc<dyn SessionModel>) {
    let nodes = vec![Node::looped("rollout", Arc::new(Toy), &[ACTIONS], &["chunks"])];
    let spec = PipelineSpec::new("toy-session", vec![TaskType::World], nodes, &[ACTIONS], "chunks")
        .unwrap()
        .with_observers(vec![Arc::new(StepCounter)]);
    let model: Arc<dyn SessionModel> = Arc::new(Model(Arc::new(spec)));
    let metrics = Metrics::register(&mut prometheus_client::registry::Registry::default());
    let live =
        LiveSessions::new(Some(model.clone()), Device::Cpu, Duration::from_secs(60), Default::default(), metrics);
    (live, model)
}

fn open(
    live: &mut LiveSessions,
    pace: &mut Deadlines,
    model: &Arc<dyn SessionModel>,
    id: &str,
) -> mpsc::Receiver<SessionEvent> {
    let (events, rx) = mpsc::channel(64);
    let (reply, mut answer) = oneshot::channel();
    let request = model.request(id, &SessionRequest::default()).unwrap();
    live.command(SessionCommand::Open { request: Box::new(request), adapters: None, events, reply }, pace);
    answer.try_recv().unwrap().unwrap();
    rx
}

/// What a session's stream carried.
#[derive(Default)]
struct Seen {
    /// Each chunk's action id.
    chunks: Vec<u64>,
    /// The counter's step events.
    steps: Vec<u64>,
    /// The counter's end event: (outcome, steps).
    end: Option<(String, u64)>,
    closed: Option<String>,
}

fn drain(rx: &mut mpsc::Receiver<SessionEvent>) -> Seen {
    let Seen { mut chunks, mut steps, mut end, mut closed } = Seen::default();
    while let Ok(e) = rx.try_recv() {
        match e {
            SessionEvent::Chunk(c) => chunks.push(c.action_id),
            SessionEvent::Plugin(OmniEvent::Plugin { name, payload, .. }) if name == "step" => {
                steps.push(payload.as_u64().unwrap())
            }
            SessionEvent::Plugin(OmniEvent::Plugin { name, payload, .. }) => {
                end = Some((name, payload.as_u64().unwrap()))
            }
            SessionEvent::Plugin(_) => {}
            SessionEvent::Closed { reason } => closed = Some(reason),
        }
    }
    Seen { chunks, steps, end, closed }
}

#[test]
fn sessions_run_as_pipeline_runs_with_per_session_observers_and_their_end_before_closed() {
    let (mut live, model) = sessions();
    let mut pace = Deadlines::new(16, 4, 0.25);
    let mut a = open(&mut live, &mut pace, &model, "a");
    let mut b = open(&mut live, &mut pace, &model, "b");
    // Interleaved by scheduler key: a (0), b (1), a, b, a, a (a: 4 steps = 2 chunks, b: 2
    // steps = 1 chunk).
    for key in [0, 1, 0, 1] {
        live.step(key, false, &mut pace);
    }
    live.command(SessionCommand::Action { id: "a".into(), action: ActionPart::key("none", 7) }, &mut pace);
    live.step(0, false, &mut pace);
    live.step(0, false, &mut pace);
    live.command(SessionCommand::Close { id: "a".into(), reason: "closed by the client".into() }, &mut pace);
    live.command(SessionCommand::Close { id: "b".into(), reason: "bye".into() }, &mut pace);
    assert!(pace.is_empty(), "closed sessions leave the scheduler's deadlines");
    assert!(live.is_empty());
    let Seen { chunks, steps, end, closed } = drain(&mut a);
    assert_eq!(chunks, [0, 7], "the action reached the loop through the inbox");
    // Each session's observer has its own state: its counts are its own steps (the 5th is
    // the step that found the inbox closed).
    assert_eq!(steps, [1, 2, 3, 4, 5]);
    // Closing ends the run: the observer hears `completed` before the stream says closed.
    assert_eq!(end, Some(("completed".to_string(), 5)));
    assert_eq!(closed.as_deref(), Some("closed by the client"));
    let Seen { chunks, steps, end, closed } = drain(&mut b);
    assert_eq!((chunks.len(), steps, end), (1, vec![1, 2, 3], Some(("completed".to_string(), 3))));
    assert_eq!(closed.as_deref(), Some("bye"));
}
