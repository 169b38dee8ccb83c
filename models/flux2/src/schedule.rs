//! The klein pipeline's schedule: base sigmas `linspace(1, 1/N, N)` shifted by a `mu` that
//! depends on the image's token count and the step count (`compute_empirical_mu`, fitted by
//! BFL), through the folder's flow-matching scheduler.

use fastvideo_layers::flow_match::FlowMatchConfig;
use fastvideo_pipeline::sampler::linspace;

/// BFL's empirical `mu` for `tokens` image tokens and `steps` steps.
pub fn empirical_mu(tokens: i64, steps: usize) -> f64 {
    let (a1, b1) = (8.73809524e-05, 1.89833333);
    let (a2, b2) = (0.00016927, 0.45666666);
    let t = tokens as f64;
    if tokens > 4300 {
        return a2 * t + b2;
    }
    let m_200 = a2 * t + b2;
    let m_10 = a1 * t + b1;
    let a = (m_200 - m_10) / 190.0;
    let b = m_200 - 200.0 * a;
    a * steps as f64 + b
}

/// The sigmas (final 0 included) of a request of `tokens` image tokens and `steps` steps.
pub fn sigmas(cfg: &FlowMatchConfig, tokens: i64, steps: usize) -> Vec<f32> {
    let base = linspace(1.0, 1.0 / steps as f64, steps);
    cfg.sigmas(&base, empirical_mu(tokens, steps))
}
