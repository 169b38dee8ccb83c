//! The typed manifest: [`manifest!`](crate::manifest) checks the kind and the hooks when the
//! plugin compiles, and writes the JSON the host reads at compile time (no allocator, no
//! serializer in the plugin).

/// One piece of a manifest's JSON, joined by [`json_bytes`].
#[doc(hidden)]
pub enum Part {
    /// Written as is.
    Raw(&'static str),
    /// A JSON string: quoted and escaped.
    Str(&'static str),
    /// `true` or `false`.
    Bool(bool),
    /// A JSON array of strings.
    List(&'static [&'static str]),
}

/// The length of the escaped, quoted JSON string `s`.
const fn str_len(s: &str) -> usize {
    let b = s.as_bytes();
    let (mut n, mut i) = (2, 0);
    while i < b.len() {
        n += match b[i] {
            b'"' | b'\\' => 2,
            c if c < 0x20 => 6,
            _ => 1,
        };
        i += 1;
    }
    n
}

/// Bytes of the manifest `parts` make.
#[doc(hidden)]
pub const fn json_len(parts: &[Part]) -> usize {
    let (mut n, mut i) = (0, 0);
    while i < parts.len() {
        n += match &parts[i] {
            Part::Raw(s) => s.len(),
            Part::Str(s) => str_len(s),
            Part::Bool(true) => 4,
            Part::Bool(false) => 5,
            Part::List(items) => {
                let (mut m, mut j) = (2, 0);
                while j < items.len() {
                    m += str_len(items[j]) + (j > 0) as usize;
                    j += 1;
                }
                m
            }
        };
        i += 1;
    }
    n
}

const fn put(out: &mut [u8], mut at: usize, bytes: &[u8]) -> usize {
    let mut i = 0;
    while i < bytes.len() {
        out[at] = bytes[i];
        at += 1;
        i += 1;
    }
    at
}

const fn put_str(out: &mut [u8], mut at: usize, s: &str) -> usize {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let b = s.as_bytes();
    at = put(out, at, b"\"");
    let mut i = 0;
    while i < b.len() {
        at = match b[i] {
            c @ (b'"' | b'\\') => put(out, at, &[b'\\', c]),
            c if c < 0x20 => put(out, at, &[b'\\', b'u', b'0', b'0', HEX[(c >> 4) as usize], HEX[(c & 15) as usize]]),
            c => put(out, at, &[c]),
        };
        i += 1;
    }
    put(out, at, b"\"")
}

/// The manifest `parts` make, as the `N` bytes [`json_len`] counted.
#[doc(hidden)]
pub const fn json_bytes<const N: usize>(parts: &[Part]) -> [u8; N] {
    let mut out = [0u8; N];
    let (mut at, mut i) = (0, 0);
    while i < parts.len() {
        at = match &parts[i] {
            Part::Raw(s) => put(&mut out, at, s.as_bytes()),
            Part::Str(s) => put_str(&mut out, at, s),
            Part::Bool(true) => put(&mut out, at, b"true"),
            Part::Bool(false) => put(&mut out, at, b"false"),
            Part::List(items) => {
                at = put(&mut out, at, b"[");
                let mut j = 0;
                while j < items.len() {
                    if j > 0 {
                        at = put(&mut out, at, b",");
                    }
                    at = put_str(&mut out, at, items[j]);
                    j += 1;
                }
                put(&mut out, at, b"]")
            }
        };
        i += 1;
    }
    assert!(at == N, "manifest length miscounted");
    out
}

/// Embeds the plugin's manifest as the `fastvideo-manifest` custom section, which the host
/// reads without running the plugin. Fields come in this order; `needs_eager` (default false)
/// and `description` may be left out:
///
/// ```
/// fastvideo_plugin_sdk::manifest! {
///     name: "dbcache",
///     version: "0.1.0",
///     kind: block_interceptor,
///     hooks: [begin_forward, after_block, end_forward],
///     // Changes what the model samples: exact requests run without it.
///     distribution_altering: true,
///     needs_eager: false,
///     description: "DBCache / FBCache block cache",
///     // A JSON schema for the plugin's parameters, written as JSON.
///     params_schema: { "type": "object", "properties": { "fn_blocks": { "type": "integer", "minimum": 1 } } },
/// }
/// ```
///
/// `kind` is one of `guider`, `stream_guider`, `step_interceptor`, `block_interceptor`, `observer`, `reward`,
/// `workflow_translator`, `expert_router`; a hook the kind does not have is a compile error. The WIT version is
/// this SDK's ([`WIT_VERSION`](crate::WIT_VERSION)).
///
/// ```compile_fail
/// // A guider has no `after_block` hook.
/// fastvideo_plugin_sdk::manifest! {
///     name: "x", version: "0.1.0", kind: guider, hooks: [after_block],
///     distribution_altering: false, params_schema: {},
/// }
/// ```
///
/// ```compile_fail
/// // No such kind.
/// fastvideo_plugin_sdk::manifest! {
///     name: "x", version: "0.1.0", kind: guidr, hooks: [combine],
///     distribution_altering: false, params_schema: {},
/// }
/// ```
///
/// ```compile_fail
/// // `distribution_altering` is a bool.
/// fastvideo_plugin_sdk::manifest! {
///     name: "x", version: "0.1.0", kind: guider, hooks: [combine],
///     distribution_altering: "no", params_schema: {},
/// }
/// ```
#[macro_export]
macro_rules! manifest {
    ($($fields:tt)*) => {
        const _: () = {
            const PARTS: &[$crate::Part] = $crate::__manifest_parts!($($fields)*);
            const N: usize = $crate::json_len(PARTS);
            #[used]
            #[link_section = "fastvideo-manifest"]
            static MANIFEST: [u8; N] = $crate::json_bytes::<N>(PARTS);
        };
    };
}

/// The [`Part`]s of a manifest (what [`manifest!`] embeds).
#[doc(hidden)]
#[macro_export]
macro_rules! __manifest_parts {
    (
        name: $name:expr,
        version: $version:expr,
        kind: $kind:ident,
        hooks: [$($hook:ident),* $(,)?],
        distribution_altering: $altering:expr,
        $(needs_eager: $eager:expr,)?
        $(description: $description:expr,)?
        params_schema: $schema:tt $(,)?
    ) => {
        &[
            $crate::Part::Raw("{\"name\":"),
            $crate::Part::Str($name),
            $crate::Part::Raw(",\"version\":"),
            $crate::Part::Str($version),
            $crate::Part::Raw(",\"kind\":"),
            $crate::Part::Str($crate::__kind!($kind)),
            $crate::Part::Raw(",\"hooks\":"),
            $crate::Part::List(&[$($crate::__hook!($kind $hook)),*]),
            $crate::Part::Raw(",\"distribution_altering\":"),
            $crate::Part::Bool($altering),
            $($crate::Part::Raw(",\"needs_eager\":"), $crate::Part::Bool($eager),)?
            $($crate::Part::Raw(",\"description\":"), $crate::Part::Str($description),)?
            $crate::Part::Raw(",\"wit\":"),
            $crate::Part::Str($crate::WIT_VERSION),
            $crate::Part::Raw(",\"params_schema\":"),
            $crate::Part::Raw(stringify!($schema)),
            $crate::Part::Raw("}"),
        ]
    };
}

/// A plugin kind's name in the manifest.
#[doc(hidden)]
#[macro_export]
macro_rules! __kind {
    (guider) => {
        "guider"
    };
    (stream_guider) => {
        "stream-guider"
    };
    (step_interceptor) => {
        "step-interceptor"
    };
    (block_interceptor) => {
        "block-interceptor"
    };
    (observer) => {
        "observer"
    };
    (reward) => {
        "reward"
    };
    (workflow_translator) => {
        "workflow-translator"
    };
    (expert_router) => {
        "expert-router"
    };
    ($other:ident) => {
        compile_error!(concat!(
            "unknown plugin kind `",
            stringify!($other),
            "`: one of guider, stream_guider, step_interceptor, block_interceptor, observer, reward, workflow_translator, expert_router"
        ))
    };
}

/// A hook's name in the manifest; a hook the kind lacks does not compile.
#[doc(hidden)]
#[macro_export]
macro_rules! __hook {
    (guider combine) => {
        "combine"
    };
    (stream_guider combine) => {
        "combine"
    };
    (step_interceptor before_step) => {
        "before-step"
    };
    (step_interceptor after_step) => {
        "after-step"
    };
    (block_interceptor begin_forward) => {
        "begin-forward"
    };
    (block_interceptor after_block) => {
        "after-block"
    };
    (block_interceptor end_forward) => {
        "end-forward"
    };
    (observer request_start) => {
        "request-start"
    };
    (observer node_start) => {
        "node-start"
    };
    (observer node_end) => {
        "node-end"
    };
    (observer step_start) => {
        "step-start"
    };
    (observer step_end) => {
        "step-end"
    };
    (observer artifact) => {
        "artifact"
    };
    (observer request_end) => {
        "request-end"
    };
    (reward score) => {
        "score"
    };
    // `score` is called with the final latents instead of the decoded video.
    (reward score_latents) => {
        "score-latents"
    };
    (workflow_translator translate) => {
        "translate"
    };
    (expert_router route) => {
        "route"
    };
    ($kind:ident $hook:ident) => {
        compile_error!(concat!("`", stringify!($hook), "` is not a hook of a ", stringify!($kind), " plugin"))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARTS: &[Part] = crate::__manifest_parts! {
        name: "say \"hi\"\n",
        version: "0.2.0",
        kind: observer,
        hooks: [step_end, request_end],
        distribution_altering: false,
        description: "a\\b",
        params_schema: { "type": "object", "properties": { "m": { "type": "number", "minimum": -1.5 } } },
    };
    const N: usize = json_len(PARTS);
    static BYTES: [u8; N] = json_bytes::<N>(PARTS);

    #[test]
    fn the_manifest_is_the_json_the_host_reads() {
        let v: serde_json::Value = serde_json::from_slice(&BYTES).expect("valid JSON");
        assert_eq!(v["name"], "say \"hi\"\n");
        assert_eq!(v["kind"], "observer");
        assert_eq!(v["hooks"], serde_json::json!(["step-end", "request-end"]));
        assert_eq!(v["distribution_altering"], false);
        assert!(v.get("needs_eager").is_none());
        assert_eq!(v["description"], "a\\b");
        assert_eq!(v["wit"], crate::WIT_VERSION);
        assert_eq!(v["params_schema"]["properties"]["m"]["minimum"], -1.5);
    }

    #[test]
    fn the_wit_version_is_the_packages() {
        let wit = include_str!("../../../wit/fastvideo-plugin/plugin.wit");
        assert!(wit.contains(&format!("package fastvideo:plugin@{};", crate::WIT_VERSION)), "{}", crate::WIT_VERSION);
    }
}
