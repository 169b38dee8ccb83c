use serde::{Deserialize, Serialize};

macro_rules! vocab {
    ($(#[$m:meta])* $name:ident { $($v:ident => $word:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $(#[doc = concat!("Written `", $word, "` in prompts.")] $v),+ }

        impl $name {
            /// Every value, in the vocabulary's fixed order (what [`index`](Self::index) counts).
            pub const ALL: &'static [$name] = &[$($name::$v),+];
            /// The word used in prompts.
            pub fn word(self) -> &'static str {
                match self { $($name::$v => $word),+ }
            }
            /// Position in [`ALL`](Self::ALL): a stable class id for datasets and per-class tallies.
            pub fn index(self) -> usize {
                Self::ALL.iter().position(|&x| x == self).expect("listed")
            }
        }
    };
}

vocab!(
    /// Object shapes.
    Shape { Circle => "circle", Square => "square", Triangle => "triangle", Star => "star", Cross => "cross" }
);
vocab!(
    /// Object colours (chosen far apart in RGB and from every background).
    Color { Red => "red", Green => "green", Blue => "blue", Yellow => "yellow", Purple => "purple", Orange => "orange" }
);
vocab!(
    /// Flat backgrounds.
    Background { White => "white", Black => "black", Gray => "gray" }
);
vocab!(
    /// What the object does over the clip.
    Motion { Left => "left", Right => "right", Up => "up", Down => "down", Growing => "growing", Shrinking => "shrinking" }
);

impl Color {
    /// The colour's RGB8 value as rendered.
    pub fn rgb(self) -> [u8; 3] {
        match self {
            Color::Red => [220, 30, 30],
            Color::Green => [30, 180, 40],
            Color::Blue => [40, 70, 230],
            Color::Yellow => [240, 220, 30],
            Color::Purple => [150, 40, 190],
            Color::Orange => [250, 140, 20],
        }
    }
}

impl Motion {
    /// The motion in the other direction: what an image-to-video prompt swaps in to show the
    /// prompt, not the picture, decides where things go.
    pub fn opposite(self) -> Motion {
        match self {
            Motion::Left => Motion::Right,
            Motion::Right => Motion::Left,
            Motion::Up => Motion::Down,
            Motion::Down => Motion::Up,
            Motion::Growing => Motion::Shrinking,
            Motion::Shrinking => Motion::Growing,
        }
    }
}

impl Background {
    /// The background's RGB8 value as rendered.
    pub fn rgb(self) -> [u8; 3] {
        match self {
            Background::White => [245, 245, 245],
            Background::Black => [15, 15, 15],
            Background::Gray => [128, 128, 128],
        }
    }
}

/// One combination of the vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Scene {
    /// What is drawn.
    pub shape: Shape,
    /// What colour it is drawn in.
    pub color: Color,
    /// What it does over the clip.
    pub motion: Motion,
    /// The flat background behind it.
    pub background: Background,
}

impl Scene {
    /// Every combination (5 x 6 x 6 x 3 = 540), in a fixed order.
    pub fn all() -> Vec<Scene> {
        let mut v = Vec::new();
        for &shape in Shape::ALL {
            for &color in Color::ALL {
                for &motion in Motion::ALL {
                    for &background in Background::ALL {
                        v.push(Scene { shape, color, motion, background });
                    }
                }
            }
        }
        v
    }

    /// Combinations never shown in training and kept for evaluation (about one in nine).
    /// Every single attribute value still appears in training; only the combination is new.
    pub fn held_out(&self) -> bool {
        (self.shape.index() + 2 * self.color.index() + 3 * self.motion.index() + 5 * self.background.index()) % 9 == 4
    }

    /// The English prompt.
    pub fn prompt(&self) -> String {
        let what = match self.motion {
            Motion::Growing | Motion::Shrinking => self.motion.word().to_string(),
            m => format!("moving {}", m.word()),
        };
        format!("a {} {} {} on a {} background", self.color.word(), self.shape.word(), what, self.background.word())
    }

    /// Parses a prompt of the form [`prompt`](Self::prompt) writes.
    pub fn from_prompt(p: &str) -> Option<Scene> {
        Scene::all().into_iter().find(|s| s.prompt() == p.trim())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_and_holdout() {
        let all = Scene::all();
        assert_eq!(all.len(), 540);
        let held: Vec<&Scene> = all.iter().filter(|s| s.held_out()).collect();
        assert!((50..=70).contains(&held.len()), "{}", held.len());
        let train: Vec<&Scene> = all.iter().filter(|s| !s.held_out()).collect();
        for &c in Color::ALL {
            assert!(train.iter().any(|s| s.color == c));
        }
        let s = Scene { shape: Shape::Circle, color: Color::Red, motion: Motion::Left, background: Background::White };
        assert_eq!(s.prompt(), "a red circle moving left on a white background");
        assert_eq!(Scene::from_prompt(&s.prompt()), Some(s));
        for &m in Motion::ALL {
            assert_ne!(m.opposite(), m);
            assert_eq!(m.opposite().opposite(), m);
        }
        let g = Scene { motion: Motion::Growing, ..s };
        assert_eq!(g.prompt(), "a red circle growing on a white background");
    }
}
