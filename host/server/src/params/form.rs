//! Form bodies (`application/x-www-form-urlencoded`, `multipart/form-data`): field names that
//! nest as `a[b][c]` (the `openai` client's `extra_body`) into one JSON object, and which fields
//! stay text.

use crate::error::ApiError;

/// How deep a form field name may nest (`a[b][c]` is 2). Plugin parameters need 2; a crafted
/// name nested thousands deep built a value whose recursive drop overflowed the stack.
const MAX_FORM_NESTING: usize = 8;

/// Form clients send nested objects as `a[b][c]=v` (the `openai` client does for `extra_body`).
pub(super) fn insert_form_field(
    map: &mut serde_json::Map<String, serde_json::Value>,
    name: &str,
    value: serde_json::Value,
) -> Result<(), ApiError> {
    let mut parts = name.split('[').map(|p| p.trim_end_matches(']'));
    let Some(first) = parts.next() else { return Ok(()) };
    let rest: Vec<&str> = parts.take(MAX_FORM_NESTING + 1).collect();
    if rest.len() > MAX_FORM_NESTING {
        let shown: String = name.chars().take(40).collect();
        return Err(ApiError::field(
            first,
            format!("form field `{shown}…` nests deeper than {MAX_FORM_NESTING} levels of [brackets]"),
        ));
    }
    let mut slot = map.entry(first.to_string()).or_insert(serde_json::Value::Null);
    for (depth, key) in rest.iter().enumerate() {
        if key.is_empty() {
            // `a[][k]`: a list (how the openai client sends a list of objects in a form). The
            // next key starts a new element when the last one has it already.
            if !slot.is_array() {
                *slot = serde_json::Value::Array(Vec::new());
            }
            let list = slot.as_array_mut().expect("just made a list");
            let next = rest.get(depth + 1);
            let reuse = next.is_some_and(|k| list.last().is_some_and(|l| l.is_object() && l.get(*k).is_none()));
            if !reuse {
                list.push(serde_json::Value::Null);
            }
            slot = list.last_mut().expect("just pushed");
            continue;
        }
        if !slot.is_object() {
            *slot = serde_json::Value::Object(Default::default());
        }
        slot = slot
            .as_object_mut()
            .expect("just made an object")
            .entry(key.to_string())
            .or_insert(serde_json::Value::Null);
    }
    *slot = value;
    Ok(())
}

pub(super) fn unknown_field(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    Some(rest[..rest.find('`')?].to_string())
}

/// Form fields are text; the ones that are numbers, booleans or objects in JSON are parsed.
pub(super) fn form_value(name: &str, text: String) -> serde_json::Value {
    const TEXT: [&str; 9] =
        ["prompt", "model", "size", "negative_prompt", "response_format", "user", "quality", "style", "seconds"];
    if TEXT.contains(&name) {
        return serde_json::Value::String(text);
    }
    serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text))
}
