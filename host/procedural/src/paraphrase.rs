//! Free-form phrasings of a [`Scene`]: synonyms for each attribute and sentence templates, drawn
//! from a seed. They train the default model's prompt rewriter (`models/default/prompt_extender`,
//! `models/training/train_rewriter.py`), which maps such phrasings back to [`Scene::prompt`], and
//! `fastvideo eval --extend` scores it on the held-out ones: held-out scenes written with
//! templates the rewriter never saw.

use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};

use crate::vocab::{Background, Color, Motion, Scene, Shape};

fn color_words(c: Color) -> &'static [&'static str] {
    match c {
        Color::Red => &["red", "crimson", "scarlet", "ruby", "cherry"],
        Color::Green => &["green", "emerald", "lime", "jade", "grassy"],
        Color::Blue => &["blue", "azure", "cobalt", "sapphire", "navy"],
        Color::Yellow => &["yellow", "golden", "lemon", "canary", "sunny"],
        Color::Purple => &["purple", "violet", "lilac", "plum", "lavender"],
        Color::Orange => &["orange", "tangerine", "apricot", "pumpkin", "amber"],
    }
}

fn shape_words(s: Shape) -> &'static [&'static str] {
    match s {
        Shape::Circle => &["circle", "disc", "disk", "dot", "ball", "orb"],
        Shape::Square => &["square", "box", "block", "tile"],
        Shape::Triangle => &["triangle", "wedge", "pyramid", "delta"],
        Shape::Star => &["star", "pentagram", "starburst", "sparkle"],
        Shape::Cross => &["cross", "plus", "plus sign", "swiss cross"],
    }
}

/// Participle phrases ("… gliding leftwards …").
fn motion_words(m: Motion) -> &'static [&'static str] {
    match m {
        Motion::Left => &[
            "moving left",
            "gliding leftwards",
            "drifting to the left",
            "sliding left",
            "heading west",
            "travelling leftward",
            "going left",
        ],
        Motion::Right => &[
            "moving right",
            "gliding rightwards",
            "drifting to the right",
            "sliding right",
            "heading east",
            "travelling rightward",
            "going right",
        ],
        Motion::Up => &["moving up", "rising", "floating upwards", "climbing", "ascending", "drifting up", "going up"],
        Motion::Down => &["moving down", "falling", "sinking", "dropping", "descending", "drifting down", "going down"],
        Motion::Growing => &["growing", "expanding", "getting bigger", "swelling", "enlarging", "inflating"],
        Motion::Shrinking => &["shrinking", "contracting", "getting smaller", "dwindling", "deflating", "shriveling"],
    }
}

/// Place phrases ("… over snow").
fn background_words(b: Background) -> &'static [&'static str] {
    match b {
        Background::White => &[
            "on a white background",
            "over snow",
            "against a white backdrop",
            "on a snowy backdrop",
            "on ivory",
            "in a bright white room",
        ],
        Background::Black => &[
            "on a black background",
            "in the dark",
            "against a night sky",
            "on a jet black backdrop",
            "in darkness",
            "on ebony",
        ],
        Background::Gray => &[
            "on a gray background",
            "on a grey backdrop",
            "against slate",
            "over concrete",
            "on an ash backdrop",
            "in fog",
        ],
    }
}

const ARTICLES: &[&str] = &["a", "one", "the", "a single"];

/// Sentence templates: `{a}` article, `{c}` colour, `{s}` shape, `{m}` motion, `{b}` place.
/// The last [`HELD_OUT_TEMPLATES`] are never trained on.
const TEMPLATES: &[&str] = &[
    "{a} {c} {s} {m} {b}",
    "{c} {s} {m} {b}",
    "{b} , {a} {c} {s} {m}",
    "{a} {s} in {c} {m} {b}",
    "there is {a} {c} {s} {m} {b}",
    "{a} {c} {s} that is {m} {b}",
    "watch {a} {c} {s} {m} {b}",
    "{a} {c} coloured {s} {m} {b}",
    "video of {a} {c} {s} {m} {b}",
    "{b} there is {a} {c} {s} {m}",
];

/// Templates kept for evaluation (the last ones of the list).
pub const HELD_OUT_TEMPLATES: usize = 2;

/// Which phrasings: the rewriter's training data, or the evaluation's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// Training scenes, training templates; one in ten is the plain prompt itself (which the
    /// rewriter should leave as it is).
    Train,
    /// Held-out scenes, every template (the held-out ones included), never the plain prompt.
    Eval,
}

/// One free-form phrasing of `scene` drawn from `seed`.
pub fn paraphrase(scene: &Scene, seed: u64, split: Split) -> String {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let templates = match split {
        Split::Train => &TEMPLATES[..TEMPLATES.len() - HELD_OUT_TEMPLATES],
        Split::Eval => TEMPLATES,
    };
    if split == Split::Train && rng.random_range(0..10) == 0 {
        return scene.prompt();
    }
    let pick = |rng: &mut rand_chacha::ChaCha8Rng, words: &[&'static str]| *words.choose(rng).expect("non-empty");
    let template = pick(&mut rng, templates);
    let a = pick(&mut rng, ARTICLES);
    let c = pick(&mut rng, color_words(scene.color));
    let s = pick(&mut rng, shape_words(scene.shape));
    let m = pick(&mut rng, motion_words(scene.motion));
    let b = pick(&mut rng, background_words(scene.background));
    template.replace("{a}", a).replace("{c}", c).replace("{s}", s).replace("{m}", m).replace("{b}", b)
}

/// `n` (phrasing, plain prompt) pairs of `split`, cycling through its scenes, from `seed`.
pub fn paraphrase_pairs(n: usize, seed: u64, split: Split) -> Vec<(String, String)> {
    let scenes: Vec<Scene> = Scene::all().into_iter().filter(|s| s.held_out() == (split == Split::Eval)).collect();
    (0..n)
        .map(|i| {
            let scene = &scenes[i % scenes.len()];
            let draw = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(i as u64);
            (paraphrase(scene, draw, split), scene.prompt())
        })
        .collect()
}

/// Every word a phrasing may use, sorted (the rewriter's tokenizer covers them all).
pub fn paraphrase_words() -> Vec<String> {
    let mut phrases: Vec<&str> = ARTICLES.to_vec();
    for &c in Color::ALL {
        phrases.extend(color_words(c));
    }
    for &s in Shape::ALL {
        phrases.extend(shape_words(s));
    }
    for &m in Motion::ALL {
        phrases.extend(motion_words(m));
    }
    for &b in Background::ALL {
        phrases.extend(background_words(b));
    }
    phrases.extend(TEMPLATES);
    let plain: Vec<String> = Scene::all().iter().map(Scene::prompt).collect();
    let mut words: Vec<String> = phrases
        .iter()
        .copied()
        .chain(plain.iter().map(String::as_str))
        .flat_map(str::split_whitespace)
        .filter(|w| !w.starts_with('{'))
        .map(str::to_string)
        .collect();
    words.sort();
    words.dedup();
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phrasings_are_seeded_and_splits_do_not_share_scenes() {
        let s = Scene { shape: Shape::Circle, color: Color::Red, motion: Motion::Left, background: Background::White };
        assert_eq!(paraphrase(&s, 7, Split::Eval), paraphrase(&s, 7, Split::Eval));
        let many: std::collections::BTreeSet<String> = (0..200).map(|i| paraphrase(&s, i, Split::Eval)).collect();
        assert!(many.len() > 100, "{}", many.len());
        let train = paraphrase_pairs(2000, 0, Split::Train);
        let eval = paraphrase_pairs(500, 0, Split::Eval);
        for (_, target) in &train {
            assert!(!Scene::from_prompt(target).unwrap().held_out());
        }
        for (text, target) in &eval {
            assert!(Scene::from_prompt(target).unwrap().held_out());
            assert_ne!(text, target);
        }
        // Held-out templates appear only in the evaluation's phrasings.
        assert!(train.iter().all(|(t, _)| !t.starts_with("video of")));
        assert!(eval.iter().any(|(t, _)| t.starts_with("video of")));
        let words = paraphrase_words();
        for (text, target) in train.iter().chain(&eval) {
            for w in text.split_whitespace().chain(target.split_whitespace()) {
                assert!(words.binary_search(&w.to_string()).is_ok(), "{w}");
            }
        }
    }
}
