//! `color_match`: the share of the object's pixels that have the colour the prompt names,
//! weighted by how close they are (1 at the exact colour, 0 at a distance of 0.5 in [0, 1]
//! RGB units), times how sure it is that there is an object at all (its mask covering at least
//! 1 % of the video). 1 is a clip whose object is exactly the named colour; a clip of another
//! colour scores near 0, and so does an empty one.

#[path = "../../scene.rs"]
mod scene;

use fastvideo_plugin_sdk::{tensor_ops as ops, Reward, Tensor};

struct ColorMatch;

impl Reward for ColorMatch {
    fn init(_params: String) -> Result<(), String> {
        Ok(())
    }

    fn score(prompt: String, video: &Tensor) -> Result<f32, String> {
        let (f, h, w) = scene::dims(video)?;
        let bg = scene::background(&prompt)?;
        let Some((_, target)) = scene::find(&prompt, scene::COLORS) else {
            return Err(format!("the prompt names no object colour (one of: {})", scene::names(scene::COLORS)));
        };
        let mask = scene::object_mask(video, bg)?;
        let close = ops::clamp(&ops::add_scalar(&ops::scale(&scene::distance(video, target)?, -2.0), 1.0), 0.0, 1.0);
        let area = scene::total(&mask)?;
        if area <= 0.0 {
            return Ok(0.0);
        }
        let purity = scene::total(&ops::mul(&mask, &close)?)? / area;
        let presence = (area / (0.01 * (f * h * w) as f32)).min(1.0);
        Ok(purity * presence)
    }
}

fastvideo_plugin_sdk::export_reward!(ColorMatch);
fastvideo_plugin_sdk::manifest! {
    name: "color_match",
    version: "0.1.0",
    kind: reward,
    hooks: [score],
    distribution_altering: false,
    description: "Share of the object in the prompt's colour (0..1)",
    params_schema: {"type": "object", "properties": {}, "additionalProperties": false},
}
