//! A session rolled out with no server: one session of a model's session pipeline (the loop
//! contract, as the engine runs sessions) driven to its end in this thread. `fastvideo world`,
//! `eval --world` and a model's warm-up roll out this way, so what they measure and show is
//! what served sessions run, whatever the family. Actions are queued up front, each from the
//! first frame of the chunk it belongs to.

use std::sync::Arc;

use anyhow::{bail, ensure, Context, Result};
use fastvideo_request::{ActionPart, OmniEvent, VideoArtifact};
use tch::Device;

use super::{ActionInbox, SessionModel, SessionRequest, ACTIONS};
use crate::{AdapterSet, CancelToken, PipelineRun, Value, Values, ADAPTERS};

/// Rolls out `asked`'s first chunk (generated, or drawn from its `start_seed` by the session
/// model's first-frame source) and then one chunk per action (names as the model lists them),
/// with `adapters` on every chunk, calling `on_chunk` as each is decoded; answers the whole
/// video. An action the model does not take is refused before any work, naming it.
pub fn rollout(
    sessions: &dyn SessionModel,
    asked: &SessionRequest,
    actions: &[String],
    device: Device,
    adapters: Option<Arc<AdapterSet>>,
    mut on_chunk: impl FnMut(&VideoArtifact),
) -> Result<VideoArtifact> {
    let known = sessions.actions();
    if let Some(a) = actions.iter().find(|a| !known.contains(a)) {
        bail!("unknown action `{a}`; this model knows {}", known.join(", "));
    }
    let request = sessions.request("offline", asked).map_err(|e| anyhow::anyhow!("{e}"))?;
    let inbox = ActionInbox::default();
    let per_chunk = sessions.frames_per_chunk() as u64;
    for (i, name) in actions.iter().enumerate() {
        // Chunk 0 is the lone first frame; chunk i + 1 starts at frame 1 + i × per_chunk.
        inbox.push(ActionPart { from_frame: Some(1 + i as u64 * per_chunk), ..ActionPart::key(name, i as u64 + 1) });
    }
    let mut values = Values::default();
    values.insert(ACTIONS, Value::Inbox(inbox.clone()));
    if let Some(set) = adapters {
        values.insert(ADAPTERS, Value::Adapters(set));
    }
    let mut run = PipelineRun::new(sessions.pipeline(), request, device, values, CancelToken::default());
    let (want, mut videos) = (actions.len() + 1, Vec::with_capacity(actions.len() + 1));
    let mut on_event = |e: OmniEvent| {
        if let OmniEvent::Chunk { video, .. } = e {
            on_chunk(&video);
            videos.push(video);
            if videos.len() == want {
                inbox.close();
            }
        }
    };
    run.run_to_end(&mut on_event)?;
    run.finish(&mut on_event)?;
    ensure!(videos.len() == want, "the session ended after {} of {want} chunks", videos.len());
    let mut all = videos.remove(0);
    for v in videos {
        all.num_frames += v.num_frames;
        all.rgb.extend(v.rgb);
    }
    Ok(all)
}

/// Parses `"right*8,up*8,none"` into action names, one per chunk (the first chunk — the lone
/// first frame — takes none and is not listed). Errors name the bad item.
pub fn parse_actions(spec: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, count) = match item.split_once('*') {
            Some((n, c)) => (
                n.trim(),
                c.trim().parse::<usize>().ok().filter(|&c| c > 0).with_context(|| {
                    format!("--actions: `{item}`: the count after `*` must be a positive whole number")
                })?,
            ),
            None => (item, 1),
        };
        out.extend(std::iter::repeat_n(name.to_string(), count));
    }
    ensure!(!out.is_empty(), "--actions: no actions given (e.g. \"right*8,up*8\")");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::parse_actions;

    #[test]
    fn action_lists_expand_counts_and_name_bad_items() {
        assert_eq!(parse_actions("right*2, up,none*1").unwrap(), ["right", "right", "up", "none"]);
        assert!(parse_actions("up*x").unwrap_err().to_string().contains("`up*x`"));
        assert!(parse_actions("up*0").is_err());
        assert!(parse_actions(" , ").is_err());
    }
}
