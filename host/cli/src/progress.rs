//! Turns a request's events into terminal progress: a spinner per one-shot node, a bar per
//! denoise loop (one tick per step).

use std::time::Duration;

use fastvideo_request::OmniEvent;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    bar: Option<ProgressBar>,
    quiet: bool,
}

impl Progress {
    pub fn new(quiet: bool) -> Self {
        Self { bar: None, quiet }
    }

    fn replace(&mut self, bar: ProgressBar) {
        if let Some(old) = self.bar.take() {
            old.finish_and_clear();
        }
        self.bar = Some(bar);
    }

    pub fn on_event(&mut self, ev: &OmniEvent) {
        if self.quiet {
            return;
        }
        match ev {
            OmniEvent::NodeStarted { node, .. } => {
                let bar = ProgressBar::new_spinner().with_message(node.clone());
                bar.set_draw_target(ProgressDrawTarget::stderr());
                bar.enable_steady_tick(Duration::from_millis(120));
                self.replace(bar);
            }
            OmniEvent::Progress { node, step, total_steps, .. } => {
                let fresh = self.bar.as_ref().is_none_or(|b| b.length() != Some(*total_steps as u64));
                if fresh {
                    let bar = ProgressBar::with_draw_target(Some(*total_steps as u64), ProgressDrawTarget::stderr());
                    bar.set_style(
                        ProgressStyle::with_template("{msg:>10} [{bar:30}] {pos}/{len} steps {per_sec} eta {eta}")
                            .expect("valid template")
                            .progress_chars("=> "),
                    );
                    bar.set_message(node.clone());
                    self.replace(bar);
                }
                if let Some(b) = &self.bar {
                    b.set_position(*step as u64);
                }
            }
            // Observer plugins (profiler, NaN watch) report here, one line per event.
            OmniEvent::Plugin { plugin, name, payload, .. } => {
                let line = format!("{plugin}: {name} {payload}");
                match &self.bar {
                    Some(b) => b.suspend(|| eprintln!("{line}")),
                    None => eprintln!("{line}"),
                }
            }
            _ => {}
        }
    }

    pub fn finish(&mut self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}
