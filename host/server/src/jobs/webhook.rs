//! Announcing a job's end to its webhook: attempts until the receiver takes the event, each
//! outcome written to the job's record (and the store) before the next, so clients see the
//! delivery's state and a restart picks it up where it stood.

use std::time::Duration;

use super::Jobs;
use crate::job::now_secs;
use crate::webhooks::{Attempt, DeliveryState, WebhookStatus, Webhooks};

impl Jobs {
    /// Delivers the ended job `id`'s event, retrying on the schedule; returns when it was
    /// delivered, given up, or the job was deleted. Runs as (part of) its own task.
    pub(super) async fn deliver(self, id: String) {
        let Some(hooks) = self.webhooks.clone() else { return };
        loop {
            let Some((video, live)) = self.with(&id, |j| (j.video.clone(), !j.deleted)) else { return };
            let Some(state) = video.webhook.clone().filter(|w| w.status == DeliveryState::Pending && live) else {
                return;
            };
            // Resumed after a restart, or waiting out a backoff.
            if let Some(at) = state.next_attempt_at {
                let wait = at.saturating_sub(now_secs());
                if wait > 0 {
                    tokio::time::sleep(Duration::from_secs(wait)).await;
                }
            }
            // The job may have been deleted during the wait: checked again where the attempt is
            // made, not only before the wait, so a DELETE stops the retries that follow it.
            let (event_id, body) = Webhooks::event(&video);
            let (h, jobs, job) = (hooks.clone(), self.clone(), id.clone());
            let url = state.url.clone();
            let wanted = move || jobs.with(&job, |j| !j.deleted) == Some(true);
            let outcome = tokio::task::spawn_blocking(move || h.attempt(&url, &event_id, &body, &wanted))
                .await
                .unwrap_or_else(|e| Attempt::Retry(e.to_string()));
            if outcome == Attempt::Cancelled {
                return;
            }
            let ended_at = video.completed_at.unwrap_or_else(now_secs);
            let next = next_state(state, outcome, &hooks, ended_at, now_secs());
            match next.status {
                DeliveryState::Delivered => hooks.metrics.delivered.inc(),
                DeliveryState::Failed => hooks.metrics.given_up.inc(),
                DeliveryState::Pending => hooks.metrics.retried.inc(),
            };
            if let Some(w) = &next.last_error.as_ref().filter(|_| next.status != DeliveryState::Delivered) {
                tracing::warn!(id, attempt = next.attempts, "webhook delivery: {w}");
            }
            let rec = self.with(&id, |j| {
                j.video.webhook = Some(next.clone());
                (!j.deleted).then(|| j.record())
            });
            let Some(Some(rec)) = rec else { return };
            if let Some(store) = self.store.clone() {
                match tokio::task::spawn_blocking(move || store.put(&rec, None)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!(id, "storing a webhook's state: {e:#}"),
                    Err(e) => tracing::warn!(id, "storing a webhook's state: {e}"),
                }
            }
        }
    }
}

/// The delivery's state after an attempt at `now`.
fn next_state(mut s: WebhookStatus, outcome: Attempt, hooks: &Webhooks, ended_at: u64, now: u64) -> WebhookStatus {
    if outcome == Attempt::Cancelled {
        // Nothing was sent.
        return s;
    }
    s.attempts += 1;
    s.next_attempt_at = None;
    match outcome {
        Attempt::Delivered => {
            s.status = DeliveryState::Delivered;
            s.delivered_at = Some(now);
        }
        Attempt::Gone => {
            s.status = DeliveryState::Failed;
            s.last_error = Some("the receiver answered 410 Gone; not retried".into());
        }
        Attempt::Cancelled => {}
        Attempt::Retry(why) => {
            let at = now + hooks.schedule.backoff(s.attempts).as_secs().max(1);
            if at > ended_at.saturating_add(hooks.schedule.window.as_secs()) {
                s.status = DeliveryState::Failed;
                s.last_error = Some(format!("{why}; gave up after {} attempts", s.attempts));
            } else {
                s.last_error = Some(why);
                s.next_attempt_at = Some(at);
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhooks::{RetrySchedule, WebhookPolicy};

    fn hooks(window: u64) -> Webhooks {
        let schedule = RetrySchedule {
            first: Duration::from_secs(1),
            max: Duration::from_secs(8),
            window: Duration::from_secs(window),
        };
        Webhooks::new(WebhookPolicy::default(), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", schedule, Default::default())
            .unwrap()
    }

    #[test]
    fn failures_back_off_until_the_window_closes_and_gone_stops_at_once() {
        let h = hooks(20);
        let mut s = WebhookStatus::pending("http://r.example/".into());
        let mut times = Vec::new();
        let mut now = 100;
        while s.status == DeliveryState::Pending {
            s = next_state(s, Attempt::Retry("HTTP 503".into()), &h, 100, now);
            times.push(now);
            now = s.next_attempt_at.unwrap_or(now);
        }
        // 1, 2, 4, 8 s apart; the next (8 s more) would pass 20 s after the end.
        assert_eq!(times, [100, 101, 103, 107, 115]);
        assert_eq!(s.status, DeliveryState::Failed);
        assert!(s.last_error.as_deref().unwrap().contains("gave up after 5 attempts"), "{s:?}");

        let s = next_state(WebhookStatus::pending("u".into()), Attempt::Gone, &h, 0, 0);
        assert_eq!((s.status, s.attempts, s.next_attempt_at), (DeliveryState::Failed, 1, None));
        let s = next_state(s.clone(), Attempt::Delivered, &h, 0, 7);
        assert_eq!((s.status, s.delivered_at), (DeliveryState::Delivered, Some(7)));
    }
}
