//! The fuzz targets: each returns whether the input was accepted (an error is a fine outcome;
//! only a panic is a crash).

use fastvideo_request::ModelLimits;

/// One parser under test.
pub struct Target {
    /// Its name on the command line and its corpus folder.
    pub name: &'static str,
    /// What it parses and where the code lives, for the listing.
    pub what: &'static str,
    /// Inputs are cut to this length.
    pub max_len: usize,
    /// Runs the parser on one input: whether it was accepted.
    pub run: fn(&[u8]) -> bool,
}

/// Every target, in the order a run without a name goes through them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "image-input",
        what: "a conditioning picture's bytes (PNG, JPEG, WebP) to RGB8 (request media/image.rs)",
        max_len: 1 << 16,
        run: image_input,
    },
    Target {
        name: "video-input",
        what: "an input video's bytes (MP4/MOV/WebM; H.264, HEVC, VP8/9, AV1) to RGB8 frames (request media/video/)",
        max_len: 1 << 16,
        run: video_input,
    },
    Target {
        name: "data-url",
        what: "a media field's text (a data: URL or plain base64) to its bytes, then to a picture (request media/image.rs image_bytes)",
        max_len: 1 << 16,
        run: data_url,
    },
    Target {
        name: "reframe",
        what: "resize_mode's arithmetic: a picture's and the output's sizes (4 u32 LE) and a mode byte to the fitted size, checked, and the pixels moved (request media/reframe.rs)",
        max_len: 64,
        run: reframe,
    },
    Target {
        name: "request-json",
        what: "a POST /v1/videos JSON body to the engine request (params.rs)",
        max_len: 1 << 16,
        run: request_json,
    },
    Target {
        name: "request-form",
        what: "multipart form fields (name=value lines) to the engine request (params.rs)",
        max_len: 1 << 16,
        run: request_form,
    },
    Target {
        name: "multipart-body",
        what: "a whole multipart/form-data body (boundary `fuzzBOUNDARY`): parts, file parts, text fields, bracketed names, to the engine request (params.rs)",
        max_len: 1 << 16,
        run: multipart_body,
    },
    Target {
        name: "deploy-toml",
        what: "a deploy file (deploy.rs's DeployConfig)",
        max_len: 1 << 16,
        run: deploy_toml,
    },
    Target {
        name: "component-audit",
        what: "a plugin component's bytes to its audit (manifest.rs's inspect)",
        max_len: 1 << 20,
        run: component_audit,
    },
    Target {
        name: "model-config",
        what: "a config.json as the transformer, VAE and UMT5 loaders read it (unknown keys refused)",
        max_len: 1 << 16,
        run: model_config,
    },
    Target {
        name: "safetensors-header",
        what: "a safetensors file's header and tensor table (the safetensors crate, as the loader uses it)",
        max_len: 1 << 16,
        run: safetensors_header,
    },
    Target {
        name: "gguf-file",
        what: "a GGUF file's header, metadata and tensor table, the model shapes ComfyUI records, block scales, and every small tensor decoded (fastvideo-gguf)",
        max_len: 1 << 16,
        run: gguf_file,
    },
    Target {
        name: "lora-file",
        what: "a LoRA safetensors file: header, key names in every format, shapes, alphas, metadata (fastvideo-lora), checked against a model's modules",
        max_len: 1 << 16,
        run: lora_file,
    },
    Target {
        name: "sharded-index",
        what: "a *.safetensors.index.json's weight map to the shard file names the loader opens (weights.rs)",
        max_len: 1 << 16,
        run: sharded_index,
    },
    Target {
        name: "chat-messages",
        what: "a chat request's messages (OpenAI JSON) parsed and rendered through a ChatML template (fastvideo-qwen chat.rs)",
        max_len: 1 << 16,
        run: chat_messages,
    },
    Target {
        name: "chat-template",
        what: "a model folder's chat template (Jinja) rendered for a fixed chat, bounded by fuel (fastvideo-qwen chat.rs)",
        max_len: 1 << 14,
        run: chat_template,
    },
    Target {
        name: "webhook-url",
        what: "a request's webhook URL against an allowlist (server webhooks.rs); an accepted URL whose scheme, host, port or path is not an allowed one is an escape and crashes the target",
        max_len: 1 << 12,
        run: webhook_url,
    },
];

const ALLOWED: [(&str, &str, u16, &str); 2] =
    [("https", "hooks.example.com", 443, "/fv/"), ("http", "10.0.0.5", 8080, "/")];

fn webhook_url(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else { return false };
    let prefixes: Vec<String> = ALLOWED.iter().map(|(s, h, p, path)| format!("{s}://{h}:{p}{path}")).collect();
    let policy = fastvideo_server::webhooks::WebhookPolicy::new(&prefixes).expect("the fixed prefixes parse");
    let Ok(accepted) = policy.check(text) else { return false };
    // Independently of the policy's own reading: where would a client really connect?
    let u = url::Url::parse(accepted.as_str()).expect("an accepted URL reparses");
    let (scheme, host, port, path) =
        (u.scheme(), u.host_str().unwrap_or_default(), u.port_or_known_default(), u.path());
    let inside = ALLOWED.iter().any(|(s, h, p, pre)| {
        *s == scheme
            && h.eq_ignore_ascii_case(host)
            && Some(*p) == port
            && (path.starts_with(pre) || format!("{path}/") == *pre)
    });
    assert!(inside && u.username().is_empty() && u.password().is_none(), "escape: `{text}` → {u}");
    true
}

const CHATML: &str = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | trim }}<|im_end|>\n{% endfor %}\
                      {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

fn chat_messages(data: &[u8]) -> bool {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else { return false };
    let Ok(messages) = fastvideo_qwen::chat::parse_messages(v.get("messages").unwrap_or(&v)) else { return false };
    fastvideo_qwen::chat::render_template(CHATML, &messages, true, "", "<|im_end|>").is_ok()
}

fn chat_template(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else { return false };
    let chat = [
        fastvideo_qwen::Message::new("system", "Rewrite prompts."),
        fastvideo_qwen::Message::new("user", "a crimson disc gliding leftwards over snow"),
    ];
    fastvideo_qwen::chat::render_template(text, &chat, true, "<s>", "</s>").is_ok()
}

fn limits() -> ModelLimits {
    ModelLimits::example()
}

fn request_json(b: &[u8]) -> bool {
    fastvideo_server::video_request_from_json(b, &limits()).is_ok()
}

fn request_form(b: &[u8]) -> bool {
    let text = String::from_utf8_lossy(b);
    let fields: Vec<(&str, &str)> = text.lines().map(|l| l.split_once('=').unwrap_or((l, ""))).collect();
    fastvideo_server::video_request_from_form(&fields, &limits()).is_ok()
}

fn multipart_body(b: &[u8]) -> bool {
    fastvideo_server::video_request_from_multipart(b, "fuzzBOUNDARY", &limits()).is_ok()
}

fn deploy_toml(b: &[u8]) -> bool {
    std::str::from_utf8(b).is_ok_and(|t| toml::from_str::<fastvideo_plugin_host::DeployConfig>(t).is_ok())
}

fn component_audit(b: &[u8]) -> bool {
    fastvideo_plugin_host::inspect(b).is_ok()
}

thread_local! {
    /// The loaders take a path: each input is written to this file first.
    static CONFIG_FILE: std::path::PathBuf =
        std::env::temp_dir().join(format!("fastvideo-fuzz-{}-{:?}.json", std::process::id(), std::thread::current().id()));
}

fn model_config(b: &[u8]) -> bool {
    CONFIG_FILE.with(|path| {
        std::fs::write(path, b).expect("writing the fuzz input file");
        let t = fastvideo_wan::TransformerConfig::load(path).is_ok();
        let v = fastvideo_wan::VaeConfig::load(path).is_ok();
        let u = fastvideo_wan::Umt5Config::load(path).is_ok();
        t || v || u
    })
}

fn safetensors_header(b: &[u8]) -> bool {
    match safetensors::SafeTensors::deserialize(b) {
        Ok(st) => {
            // Walk every tensor view: offsets and shapes must agree with the data.
            for (_, view) in st.tensors() {
                let _ = (view.shape().iter().product::<usize>(), view.data().len());
            }
            true
        }
        Err(_) => false,
    }
}

fn gguf_file(b: &[u8]) -> bool {
    let Ok(file) = fastvideo_gguf::GgufFile::parse(b) else { return false };
    for t in &file.tensors {
        let _ = file.shape(t);
        let bytes = &b[t.start..t.end];
        let _ = fastvideo_gguf::first_bad_scale(t.ty, bytes);
        // Decoding is bounded by the input (the range lies inside it); large tensors are
        // skipped only to keep executions fast.
        if t.len() <= 1 << 16 {
            let mut out = vec![0f32; t.len() as usize];
            fastvideo_gguf::dequantize(t.ty, bytes, &mut out).expect("a parsed tensor's bytes are whole blocks");
        }
    }
    true
}

/// The linear modules of tests/fixtures/tiny-wan's transformer (2 blocks of width 24).
fn tiny_wan_modules() -> Vec<fastvideo_lora::TargetModule> {
    let m = |name: String, in_dim, out_dim| fastvideo_lora::TargetModule { name, in_dim, out_dim, bias: true };
    let mut v = vec![
        m("condition_embedder.time_embedder.linear_1".into(), 32, 24),
        m("condition_embedder.time_embedder.linear_2".into(), 24, 24),
        m("condition_embedder.time_proj".into(), 24, 144),
        m("condition_embedder.text_embedder.linear_1".into(), 32, 24),
        m("condition_embedder.text_embedder.linear_2".into(), 24, 24),
        m("proj_out".into(), 24, 16),
    ];
    for b in 0..2 {
        for a in ["attn1", "attn2"] {
            for p in ["to_q", "to_k", "to_v", "to_out.0"] {
                v.push(m(format!("blocks.{b}.{a}.{p}"), 24, 24));
            }
        }
        v.push(m(format!("blocks.{b}.ffn.net.0.proj"), 24, 48));
        v.push(m(format!("blocks.{b}.ffn.net.2"), 48, 24));
    }
    v
}

fn lora_file(b: &[u8]) -> bool {
    static MODULES: std::sync::OnceLock<Vec<fastvideo_lora::TargetModule>> = std::sync::OnceLock::new();
    match fastvideo_lora::LoraFile::parse(b, &fastvideo_wan::lora_keys::WanKeys) {
        Ok(f) => {
            let s = f.summary();
            let _ = (s.to_json(), s.to_string());
            for p in f.modules.values() {
                // Whatever the file says, a patch's tensors hold exactly their shapes' bytes.
                for t in [&p.down, &p.up, &p.diff, &p.diff_b].into_iter().flatten() {
                    assert_eq!(t.data.len(), t.shape.iter().product::<usize>() * t.dtype.size(), "{}", t.key);
                }
                assert!(p.scale().is_finite(), "scale of a checked patch");
            }
            f.check(MODULES.get_or_init(tiny_wan_modules)).is_ok()
        }
        Err(_) => false,
    }
}

fn sharded_index(b: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(b) else { return false };
    match fastvideo_wan::weights::index_shards(text) {
        Ok(names) => {
            // Whatever the index says, every name stays a plain file of the model folder.
            let bad = names.iter().find(|n| n.contains(['/', '\\']) || *n == ".." || !n.ends_with(".safetensors"));
            assert!(bad.is_none(), "the index named {:?}", bad.map(|n| n.chars().take(80).collect::<String>()));
            true
        }
        Err(_) => false,
    }
}

fn image_input(b: &[u8]) -> bool {
    match fastvideo_request::decode_image(b, fastvideo_request::ImageRole::FirstFrame, "inputs[0]") {
        Ok(im) => {
            assert_eq!(im.rgb.len() as u64, im.width as u64 * im.height as u64 * 3, "RGB8 size");
            true
        }
        Err(_) => false,
    }
}

fn video_input(b: &[u8]) -> bool {
    match fastvideo_request::decode_video(b, "inputs[0]") {
        Ok(v) => {
            assert!(v.frames >= 1 && v.frames <= fastvideo_request::MAX_VIDEO_FRAMES, "{} frames", v.frames);
            assert_eq!(v.rgb.len() as u64, v.frames as u64 * v.width as u64 * v.height as u64 * 3, "RGB8 size");
            true
        }
        Err(_) => false,
    }
}

fn data_url(b: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(b) else { return false };
    match fastvideo_request::image_bytes(None, Some(text), "inputs[0]") {
        Ok(bytes) => {
            // Base64 gives 3 bytes for every 4 characters, at most.
            assert!(bytes.len() <= text.len() / 4 * 3, "{} bytes from {} characters", bytes.len(), text.len());
            let _ = image_input(&bytes);
            true
        }
        Err(e) => {
            assert_eq!(e.field, "inputs[0].b64", "{e}");
            false
        }
    }
}

/// Pixels the reframe target moves at most (larger inputs only exercise the arithmetic).
const REFRAME_PIXELS: u64 = 1 << 16;

fn reframe(b: &[u8]) -> bool {
    use fastvideo_request::{check_fit, fitted_size, ResizeMode};
    let mut raw = [0u8; 17];
    raw[..b.len().min(17)].copy_from_slice(&b[..b.len().min(17)]);
    let n = |i: usize| u32::from_le_bytes(raw[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
    let (w, h, ow, oh) = (n(0), n(1), n(2), n(3));
    let mode = [ResizeMode::Stretch, ResizeMode::Crop, ResizeMode::Pad][raw[16] as usize % 3];
    let (fw, fh) = fitted_size(w, h, ow, oh, mode);
    let (w64, h64) = (w as u64, h as u64);
    match mode {
        ResizeMode::Stretch => assert_eq!((fw, fh), (w64, h64)),
        ResizeMode::Crop => assert!(fw <= w64 && fh <= h64 && (fw == w64 || fh == h64), "{fw}x{fh}"),
        ResizeMode::Pad => assert!(fw >= w64 && fh >= h64 && (fw == w64 || fh == h64), "{fw}x{fh}"),
    }
    let Ok((cw, ch)) = check_fit(w, h, ow, oh, mode) else { return false };
    assert_eq!((cw as u64, ch as u64), (fw, fh));
    assert!(fw * fh <= fastvideo_request::MAX_FITTED_PIXELS, "{fw}x{fh}");
    if w64 * h64 > REFRAME_PIXELS || fw * fh > REFRAME_PIXELS {
        return true;
    }
    // Every pixel says where it was: (x, y) in 3 bytes, wrapping.
    let at = |x: u32, y: u32| [(x & 0xff) as u8, (y & 0xff) as u8, ((x >> 8) ^ (y >> 8)) as u8];
    let rgb: Vec<u8> = (0..h).flat_map(|y| (0..w).flat_map(move |x| at(x, y))).collect();
    let r = fastvideo_request::reframe(&rgb, w, h, ow, oh, mode);
    assert_eq!((r.width, r.height), (cw, ch));
    assert_eq!(r.rgb.len() as u64, fw * fh * 3);
    let px = |x: u32, y: u32| &r.rgb[((y * cw + x) * 3) as usize..][..3];
    if mode == ResizeMode::Crop {
        let (x0, y0) = ((w - cw) / 2, (h - ch) / 2);
        for (x, y) in [(0, 0), (cw - 1, ch - 1), (cw / 2, ch / 2)] {
            assert_eq!(px(x, y), at(x + x0, y + y0), "crop pixel ({x}, {y})");
        }
    } else if mode == ResizeMode::Pad {
        let (x0, y0) = ((cw - w) / 2, (ch - h) / 2);
        for (x, y) in [(0, 0), (w - 1, h - 1), (w / 2, h / 2)] {
            assert_eq!(px(x + x0, y + y0), at(x, y), "pad pixel ({x}, {y})");
        }
        let black = (x0 > 0).then(|| px(0, ch / 2)).or((y0 > 0).then(|| px(cw / 2, 0)));
        assert!(black.is_none_or(|p| p == [0, 0, 0]), "pad bars are black");
    }
    true
}
