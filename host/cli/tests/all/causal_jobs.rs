//! Causal video as a job: `POST /v1/videos` naming the world model runs a session under a list of
//! actions; `content?stream=1` streams fragmented MP4 as chunks finish, the whole MP4 after.

use std::io::Cursor;

use serde_json::{json, Value};

use crate::common::server::Server;

/// Top-level boxes of `data`: (type, start, end).
fn boxes(data: &[u8]) -> Vec<([u8; 4], usize, usize)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 8 <= data.len() {
        let size = u32::from_be_bytes(data[at..at + 4].try_into().unwrap()) as usize;
        assert!(size >= 8 && at + size <= data.len(), "a box overruns the stream at {at}");
        out.push((data[at + 4..at + 8].try_into().unwrap(), at, at + size));
        at += size;
    }
    assert_eq!(at, data.len(), "the stream is whole boxes");
    out
}

/// Samples in a `moof` (its `traf`'s `trun` sample count).
fn samples_in(data: &[u8], start: usize, end: usize) -> u32 {
    let trun = data[start..end].windows(4).position(|w| w == b"trun").expect("a trun") + start;
    u32::from_be_bytes(data[trun + 8..trun + 12].try_into().unwrap())
}

#[test]
fn a_world_model_job_streams_fragments_and_keeps_the_whole_mp4() {
    let server = Server::start(&["--world", "default"]);
    let (status, v) =
        server.post("/v1/videos", json!({"model": "world", "actions": ["right", "right", "up"], "seed": 3}));
    assert_eq!(status, 200, "{v}");
    // The first frame, then 4 frames per action.
    assert_eq!((v["num_frames"].as_u64(), v["model"].as_str()), (Some(13), Some("world")), "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    // Read while the chunks are made: the body ends with the job.
    let (status, stream) = server.bytes(&format!("/v1/videos/{id}/content?stream=1"));
    assert_eq!(status, 200);
    let top = boxes(&stream);
    let kinds: Vec<&[u8; 4]> = top.iter().map(|(k, _, _)| k).collect();
    assert_eq!(kinds[..2], [b"ftyp", b"moov"]);
    assert_eq!(kinds[2..], [b"moof", b"mdat", b"moof", b"mdat", b"moof", b"mdat", b"moof", b"mdat"]);
    let per_chunk: Vec<u32> =
        top.iter().filter(|(k, _, _)| k == b"moof").map(|&(_, s, e)| samples_in(&stream, s, e)).collect();
    assert_eq!(per_chunk, [1, 4, 4, 4], "a fragment per chunk: the first frame, then 4 frames each");
    // The init segment through an independent demuxer: the session's frame size.
    let reader = mp4::Mp4Reader::read_header(Cursor::new(stream.clone()), stream.len() as u64).unwrap();
    let track = reader.tracks().values().next().unwrap();
    assert_eq!((track.width(), track.height()), (64, 64));

    let done = server.wait_done(&id);
    assert_eq!((done["status"].as_str(), done["progress"].as_u64()), (Some("completed"), Some(100)), "{done}");
    let (status, mp4) = server.bytes(&format!("/v1/videos/{id}/content"));
    assert_eq!(status, 200);
    let reader = mp4::Mp4Reader::read_header(Cursor::new(mp4.clone()), mp4.len() as u64).unwrap();
    assert_eq!(reader.sample_count(1).unwrap(), 13, "the whole clip");
    // A late reader gets the whole stream again.
    assert_eq!(server.bytes(&format!("/v1/videos/{id}/content?stream=1")).1, stream);
}

#[test]
fn bad_causal_jobs_are_refused_by_name() {
    let server = Server::start(&["--world", "default"]);
    let cases: [(Value, &str); 6] = [
        (json!({"model": "world", "actions": ["jump"]}), "actions"),
        (json!({"model": "world", "actions": ["up"], "size": "64x64"}), "size"),
        (json!({"model": "world", "actions": ["up"], "rewards": ["color_match"]}), "rewards"),
        (json!({"model": "world", "actions": ["up"], "num_frames": 9}), "num_frames"),
        (json!({"prompt": "a red circle", "actions": ["up"]}), "actions"),
        (json!({"model": "world", "actions": []}), "actions"),
    ];
    for (body, field) in cases {
        let (status, v) = server.post("/v1/videos", body.clone());
        assert_eq!((status, v["error"]["param"].as_str()), (400, Some(field)), "{body}: {v}");
    }
    // A plain job has no fragment stream.
    let (_, v) = server.post(
        "/v1/videos",
        json!({"prompt": "a red circle moving left on a white background", "num_inference_steps": 2}),
    );
    let id = v["id"].as_str().unwrap();
    let (status, v) = server.get(&format!("/v1/videos/{id}/content?stream=1"));
    assert_eq!((status, v["error"]["param"].as_str()), (400, Some("stream")), "{v}");
}
