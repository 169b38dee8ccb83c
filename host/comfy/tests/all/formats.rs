//! Both ComfyUI formats into the normalized graph: every UI-format feature the frontend's
//! prompt conversion handles (links, reroutes, bypass, mute, primitive nodes, notes, nested
//! subgraphs with their virtual nodes and promoted widgets, positional widgets), the API format,
//! and the errors a malformed file gets.

use crate::common;

use fastvideo_comfy::{format_of, parse, Format, Input, Workflow};
use serde_json::{json, Value};

fn link(node: &str, output: usize) -> Input {
    Input::Link { node: node.into(), output }
}

fn value(v: Value) -> Input {
    Input::Value(v)
}

fn node(id: i64, ty: &str, inputs: Value, outputs: Value, widgets: Value) -> Value {
    json!({ "id": id, "type": ty, "mode": 0, "inputs": inputs, "outputs": outputs, "widgets_values": widgets })
}

/// A workflow using every feature: a loader reaching a sampler through a reroute and a
/// bypassed node, a muted negative prompt, a seed from a primitive node, a note, and a
/// subgraph (with a nested one) fed by the loader and a promoted widget.
fn workflow() -> Value {
    let mut bypassed = node(
        3,
        "ModelSamplingSD3",
        json!([{"name": "model", "type": "MODEL", "link": 2}]),
        json!([{"name": "MODEL", "type": "MODEL", "links": [3]}]),
        json!([8]),
    );
    bypassed["mode"] = json!(4);
    let mut muted = node(
        6,
        "CLIPTextEncode",
        json!([]),
        json!([{"name": "CONDITIONING", "type": "CONDITIONING", "links": [5]}]),
        json!(["bad"]),
    );
    muted["mode"] = json!(2);
    let mut instance = node(
        9,
        "sg-1",
        json!([{"name": "model", "type": "MODEL", "link": 8}, {"name": "steps", "type": "INT", "widget": {"name": "steps"}, "link": null}]),
        json!([{"name": "LATENT", "type": "LATENT", "links": [9]}]),
        json!([12, "proxy text"]),
    );
    instance["properties"] = json!({ "proxyWidgets": [["-1", "steps"], ["21", "text"]] });
    let sg2 = json!({
        "id": "sg-2", "inputs": [], "outputs": [{"name": "LATENT", "type": "LATENT"}],
        "nodes": [node(30, "EmptyHunyuanLatentVideo", json!([]), json!([{"name": "LATENT", "type": "LATENT", "links": [40]}]), json!([64, 48, 9, 1]))],
        "links": [{"id": 40, "origin_id": 30, "origin_slot": 0, "target_id": -20, "target_slot": 0, "type": "LATENT"}],
    });
    let sg1 = json!({
        "id": "sg-1",
        "inputs": [{"name": "model", "type": "MODEL"}, {"name": "steps", "type": "INT"}],
        "outputs": [{"name": "LATENT", "type": "LATENT"}],
        "nodes": [
            node(20, "KSampler", json!([
                {"name": "model", "type": "MODEL", "link": 30},
                {"name": "positive", "type": "CONDITIONING", "link": 31},
                {"name": "latent_image", "type": "LATENT", "link": 32},
                {"name": "steps", "type": "INT", "widget": {"name": "steps"}, "link": 33}]),
                json!([{"name": "LATENT", "type": "LATENT", "links": [34]}]),
                json!([7, "fixed", 30, 5.0, "euler", "normal", 1.0])),
            node(21, "CLIPTextEncode", json!([]), json!([{"name": "CONDITIONING", "type": "CONDITIONING", "links": [31]}]), json!(["inner text"])),
            node(22, "sg-2", json!([]), json!([{"name": "LATENT", "type": "LATENT", "links": [32]}]), json!([])),
        ],
        "links": [
            {"id": 30, "origin_id": -10, "origin_slot": 0, "target_id": 20, "target_slot": 0, "type": "MODEL"},
            {"id": 31, "origin_id": 21, "origin_slot": 0, "target_id": 20, "target_slot": 1, "type": "CONDITIONING"},
            {"id": 32, "origin_id": 22, "origin_slot": 0, "target_id": 20, "target_slot": 2, "type": "LATENT"},
            {"id": 33, "origin_id": -10, "origin_slot": 1, "target_id": 20, "target_slot": 3, "type": "INT"},
            {"id": 34, "origin_id": 20, "origin_slot": 0, "target_id": -20, "target_slot": 0, "type": "LATENT"},
        ],
    });
    json!({
        "nodes": [
            node(1, "UNETLoader", json!([]), json!([{"name": "MODEL", "type": "MODEL", "links": [1, 8]}]), json!(["wan.safetensors", "default"])),
            node(2, "Reroute", json!([{"name": "", "type": "*", "link": 1}]), json!([{"name": "", "type": "MODEL", "links": [2]}]), json!([])),
            bypassed,
            node(4, "KSampler", json!([
                {"name": "model", "type": "MODEL", "link": 3},
                {"name": "positive", "type": "CONDITIONING", "link": 4},
                {"name": "negative", "type": "CONDITIONING", "link": 5},
                {"name": "seed", "type": "INT", "widget": {"name": "seed"}, "link": 7}]),
                json!([{"name": "LATENT", "type": "LATENT", "links": []}]),
                json!([5, "randomize", 20, 6.0, "uni_pc", "simple", 1.0])),
            node(5, "CLIPTextEncode", json!([{"name": "clip", "type": "CLIP", "link": null}]),
                json!([{"name": "CONDITIONING", "type": "CONDITIONING", "links": [4]}]), json!(["a fox"])),
            muted,
            node(7, "PrimitiveNode", json!([]), json!([{"name": "INT", "type": "INT", "links": [7]}]), json!([42, "fixed"])),
            node(8, "Note", json!([]), json!([]), json!(["remember the fox"])),
            instance,
            node(10, "VAEDecode", json!([{"name": "samples", "type": "LATENT", "link": 9}]), json!([]), json!([])),
            node(11, "SomeCustomNode", json!([]), json!([]), json!([1, "two"])),
        ],
        "links": [
            [1, 1, 0, 2, 0, "MODEL"], [2, 2, 0, 3, 0, "MODEL"], [3, 3, 0, 4, 0, "MODEL"],
            [4, 5, 0, 4, 1, "CONDITIONING"], [5, 6, 0, 4, 2, "CONDITIONING"], [7, 7, 0, 4, 3, "INT"],
            [8, 1, 0, 9, 0, "MODEL"], [9, 9, 0, 10, 0, "LATENT"],
        ],
        "definitions": { "subgraphs": [sg1, sg2] },
    })
}

fn flat() -> Workflow {
    parse(&workflow(), &common::core_schemas()).unwrap()
}

#[test]
fn only_executable_nodes_remain_with_subgraph_ids_nested() {
    let w = flat();
    let ids: Vec<&str> = w.nodes.iter().map(|n| n.id.as_str()).collect();
    // Reroute 2, bypassed 3, muted 6, primitive 7, note 8 and the subgraph instances are gone.
    assert_eq!(ids, ["1", "4", "5", "9:20", "9:21", "9:22:30", "10", "11"]);
}

#[test]
fn links_pass_through_reroutes_and_bypassed_nodes_and_muted_sources_vanish() {
    let w = flat();
    let k = &w.node("4").unwrap().inputs;
    assert_eq!(k["model"], link("1", 0), "loader → reroute → bypassed ModelSamplingSD3 → sampler");
    assert_eq!(k["positive"], link("5", 0));
    assert!(!k.contains_key("negative"), "its source is muted");
    assert!(!w.node("5").unwrap().inputs.contains_key("clip"), "unconnected");
}

#[test]
fn widgets_are_named_and_the_seed_control_value_skipped() {
    let w = flat();
    let k = &w.node("4").unwrap().inputs;
    assert_eq!(k["seed"], value(json!(42)), "the primitive node's value wins over the widget's 5");
    assert_eq!(k["steps"], value(json!(20)), "`randomize` after the seed is the frontend's, not steps");
    assert_eq!(k["cfg"], value(json!(6.0)));
    assert_eq!(k["sampler_name"], value(json!("uni_pc")));
    assert_eq!(k["scheduler"], value(json!("simple")));
    assert_eq!(k["denoise"], value(json!(1.0)));
    assert_eq!(w.node("1").unwrap().inputs["weight_dtype"], value(json!("default")));
    // A type without a schema keeps its values, unnamed.
    let custom = w.node("11").unwrap();
    assert!(custom.inputs.is_empty());
    assert_eq!(custom.unnamed, [json!(1), json!("two")]);
}

#[test]
fn subgraphs_wire_their_virtual_nodes_and_promoted_widgets() {
    let w = flat();
    let inner = &w.node("9:20").unwrap().inputs;
    assert_eq!(inner["model"], link("1", 0), "subgraph input 0 (−10) is the instance's model input");
    assert_eq!(inner["steps"], value(json!(12)), "an unconnected promoted input takes the instance's value");
    assert_eq!(inner["positive"], link("9:21", 0));
    assert_eq!(inner["latent_image"], link("9:22:30", 0), "through the nested subgraph's output (−20)");
    assert_eq!(inner["seed"], value(json!(7)));
    assert_eq!(w.node("9:21").unwrap().inputs["text"], value(json!("proxy text")), "a proxy widget's value");
    assert_eq!(w.node("9:22:30").unwrap().inputs["height"], value(json!(48)));
    assert_eq!(
        w.node("10").unwrap().inputs["samples"],
        link("9:20", 0),
        "the instance's output is the inner sampler's"
    );
}

#[test]
fn the_api_format_reads_and_round_trips() {
    let api = flat().to_api();
    assert_eq!(api["4"]["inputs"]["model"], json!(["1", 0]));
    assert_eq!(format_of(&api).unwrap(), Format::Api);
    let again = parse(&json!({ "prompt": api.clone() }), &Default::default()).unwrap();
    assert_eq!(again.to_api(), api);
    assert_eq!(again.node("9:20").unwrap().inputs["latent_image"], link("9:22:30", 0));
}

#[test]
fn malformed_workflows_name_the_node_and_field() {
    let err = |v: Value| parse(&v, &Default::default()).unwrap_err();
    let mut w = workflow();
    w["links"].as_array_mut().unwrap().retain(|l| l[0] != 9);
    let e = err(w);
    assert_eq!((e.node.as_deref(), e.field.as_str()), (Some("10"), "inputs.samples"), "{e}");
    assert!(e.to_string().contains("link 9 is not in the link table"), "{e}");

    let e = err(json!({ "3": { "class_type": "KSampler", "inputs": { "model": ["4", "x"] } } }));
    assert_eq!(e.to_string(), "node 3: inputs.model: a list is a link: [node_id, output_index]");
    let e = err(json!({ "3": { "class_type": "KSampler", "inputs": { "model": ["4", 0] } } }));
    assert_eq!(e.to_string(), "node 3: inputs.model: links to node 4, which is not in the workflow");
    let e = err(json!({ "3": { "class_type": 5 } }));
    assert_eq!(e.to_string(), "node 3: class_type: missing or not a string");
    let e = err(json!({ "3": { "inputs": {} } }));
    assert!(e.to_string().contains("neither a UI workflow"), "{e}");
    let e = err(json!({ "nodes": [{ "id": 1 }], "links": [] }));
    assert_eq!(e.to_string(), "node 1: type: missing or not a string");
    let e = err(json!({ "nodes": [], "links": [[1, 2]] }));
    assert_eq!(e.field, "links[0]");

    let mut looped = workflow();
    looped["definitions"]["subgraphs"][1]["nodes"] = json!([node(31, "sg-1", json!([]), json!([]), json!([]))]);
    looped["definitions"]["subgraphs"][0]["nodes"].as_array_mut().unwrap().truncate(3);
    let e = err(looped);
    assert!(e.to_string().contains("subgraphs nest deeper than 32"), "{e}");
}

#[test]
fn seeds_without_a_control_value_keep_every_widget() {
    // Older files (and API-converted ones) have no control value after the seed.
    let s = common::core_schemas();
    let named = s.get("KSampler").unwrap().name_widgets(&[
        json!(5),
        json!(20),
        json!(6.0),
        json!("euler"),
        json!("simple"),
        json!(1.0),
    ]);
    let steps = named.iter().find(|(k, _)| k == "steps").unwrap();
    assert_eq!(steps.1, json!(20));
    assert_eq!(named.len(), 6);
}
