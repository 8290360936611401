//! A `tools/call` result as the model sees it (sans IO: JSON in, [`ToolOutput`] out).
//!
//! - text items are joined with blank lines;
//! - images become image blocks ([`ToolOutput::images`]), never base64 text; one too large for
//!   a provider, or not an image, becomes a placeholder naming its type and size;
//! - audio and binary resources are declared unsupported with type and size, never dropped
//!   silently; embedded text resources are shown with their uri; resource links with uri and
//!   name;
//! - `structuredContent` is checked against the tool's `outputSchema` when it has one: a result
//!   that does not conform (or is missing) is a tool error; with no content items, the
//!   structured value is the text;
//! - `isError: true` is a tool error carrying the same text.

use anvil_llm::capability::{base64_decoded_len, size_label};
use serde_json::Value;

use crate::tool::{ToolError, ToolImage, ToolOutput};

/// Largest image passed to the model (decoded bytes); providers refuse larger ones.
pub const MAX_IMAGE_BYTES: usize = 5 * 1024 * 1024;

/// Converts `result` (a `CallToolResult` as JSON). `schema` is the tool's compiled
/// `outputSchema`, if it declared one.
pub fn convert(
    result: &Value,
    schema: Option<&jsonschema::Validator>,
) -> Result<ToolOutput, ToolError> {
    let mut parts: Vec<String> = Vec::new();
    let mut images = Vec::new();
    let items = result
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for item in items {
        match item.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" => parts.push(str_field(item, "text").to_string()),
            "image" => {
                let mime = str_field(item, "mimeType");
                let data = str_field(item, "data");
                let bytes = base64_decoded_len(data);
                if !mime.starts_with("image/") || !plausible_base64(data) {
                    parts.push(format!(
                        "[image that could not be shown: type {}, {}]",
                        or_unknown(mime),
                        size_label(bytes)
                    ));
                } else if bytes > MAX_IMAGE_BYTES {
                    parts.push(format!(
                        "[image not shown: {mime}, {}, over the {} limit]",
                        size_label(bytes),
                        size_label(MAX_IMAGE_BYTES)
                    ));
                } else {
                    parts.push(format!("[image: {mime}, {}, attached]", size_label(bytes)));
                    images.push(ToolImage {
                        media_type: mime.to_string(),
                        data: data.to_string(),
                    });
                }
            }
            "audio" => parts.push(format!(
                "[audio not supported: {}, {}]",
                or_unknown(str_field(item, "mimeType")),
                size_label(base64_decoded_len(str_field(item, "data")))
            )),
            "resource_link" => {
                let mut line = format!(
                    "[resource link: {} <{}>",
                    str_field(item, "name"),
                    str_field(item, "uri")
                );
                if let Some(d) = item.get("description").and_then(Value::as_str) {
                    line.push_str(&format!(" — {d}"));
                }
                line.push(']');
                parts.push(line);
            }
            "resource" => {
                let resource = item.get("resource").unwrap_or(&Value::Null);
                let uri = str_field(resource, "uri");
                let mime = str_field(resource, "mimeType");
                if let Some(text) = resource.get("text").and_then(Value::as_str) {
                    parts.push(format!("[resource {uri}]\n{text}"));
                } else {
                    parts.push(format!(
                        "[binary resource not supported: {uri}, {}, {}]",
                        or_unknown(mime),
                        size_label(base64_decoded_len(str_field(resource, "blob")))
                    ));
                }
            }
            other => parts.push(format!(
                "[content of type '{}' not supported]",
                or_unknown(other)
            )),
        }
    }
    let structured = result.get("structuredContent");
    let is_error = result.get("isError").and_then(Value::as_bool) == Some(true);
    if parts.is_empty()
        && let Some(value) = structured
    {
        parts.push(value.to_string());
    }
    let text = parts.join("\n\n");
    if is_error {
        return Err(ToolError::Failed(if text.is_empty() {
            "the tool reported an error without a message".into()
        } else {
            text
        }));
    }
    if let Some(schema) = schema {
        match structured {
            None => {
                return Err(ToolError::Failed(
                    "the server's result has no structuredContent, but the tool declares an \
                     outputSchema; the result cannot be trusted"
                        .into(),
                ));
            }
            Some(value) => {
                if let Some(e) = schema.iter_errors(value).next() {
                    let at = e.instance_path().to_string();
                    let at = if at.is_empty() { "/".into() } else { at };
                    return Err(ToolError::Failed(format!(
                        "the server's structuredContent does not match the tool's outputSchema \
                         (at {at}: {e})"
                    )));
                }
            }
        }
    }
    Ok(ToolOutput { text, images })
}

/// Compiles a tool's `outputSchema`. `Err` names why it cannot be used.
pub fn compile(schema: &Value) -> Result<jsonschema::Validator, String> {
    jsonschema::validator_for(schema).map_err(|e| e.to_string())
}

fn str_field<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() { "unknown" } else { s }
}

fn plausible_base64(s: &str) -> bool {
    !s.is_empty()
        && s.len().is_multiple_of(4)
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

    #[test]
    fn text_items_are_joined() {
        let out = convert(
            &json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}),
            None,
        )
        .unwrap();
        assert_eq!(out.text, "a\n\nb");
        assert!(out.images.is_empty());
    }

    #[test]
    fn images_are_image_blocks_never_base64_text() {
        let out = convert(
            &json!({"content": [{"type": "image", "mimeType": "image/png", "data": PNG}]}),
            None,
        )
        .unwrap();
        assert_eq!(out.images.len(), 1);
        assert_eq!(out.images[0].media_type, "image/png");
        assert!(!out.text.contains(PNG));
        assert!(out.text.contains("image/png"), "{}", out.text);
    }

    #[test]
    fn an_oversized_or_broken_image_is_a_placeholder() {
        let big = "A".repeat(8 * 1024 * 1024);
        let out = convert(
            &json!({"content": [
                {"type": "image", "mimeType": "image/png", "data": big},
                {"type": "image", "mimeType": "text/html", "data": PNG},
                {"type": "image", "mimeType": "image/png", "data": "not base64!"},
            ]}),
            None,
        )
        .unwrap();
        assert!(out.images.is_empty());
        assert!(out.text.contains("over the 5.0 MB limit"), "{}", out.text);
        assert!(out.text.contains("type text/html"), "{}", out.text);
        assert_eq!(out.text.matches("could not be shown").count(), 2);
    }

    #[test]
    fn links_resources_and_audio_are_declared() {
        let out = convert(
            &json!({"content": [
                {"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt"},
                {"type": "resource", "resource": {"uri": "mem://x", "text": "hello"}},
                {"type": "resource", "resource": {"uri": "mem://y", "mimeType": "application/pdf", "blob": "AAAA"}},
                {"type": "audio", "mimeType": "audio/wav", "data": "AAAA"},
                {"type": "video"},
            ]}),
            None,
        )
        .unwrap();
        for needle in [
            "[resource link: a.txt <file:///a.txt>]",
            "[resource mem://x]\nhello",
            "binary resource not supported: mem://y, application/pdf, 3 bytes",
            "[audio not supported: audio/wav, 3 bytes]",
            "type 'video' not supported",
        ] {
            assert!(out.text.contains(needle), "{needle}: {}", out.text);
        }
    }

    #[test]
    fn is_error_results_are_tool_errors() {
        let e = convert(
            &json!({"content": [{"type": "text", "text": "no such file"}], "isError": true}),
            None,
        )
        .unwrap_err();
        assert_eq!(e, ToolError::Failed("no such file".into()));
    }

    #[test]
    fn structured_content_is_checked_against_the_output_schema() {
        let schema = compile(&json!({
            "type": "object",
            "properties": {"sum": {"type": "number"}},
            "required": ["sum"]
        }))
        .unwrap();
        let ok = convert(
            &json!({"content": [], "structuredContent": {"sum": 3}}),
            Some(&schema),
        )
        .unwrap();
        assert_eq!(ok.text, r#"{"sum":3}"#);
        let bad = convert(
            &json!({"content": [], "structuredContent": {"sum": "three"}}),
            Some(&schema),
        )
        .unwrap_err();
        assert!(
            matches!(&bad, ToolError::Failed(m) if m.contains("does not match") && m.contains("/sum")),
            "{bad:?}"
        );
        let missing = convert(
            &json!({"content": [{"type": "text", "text": "3"}]}),
            Some(&schema),
        )
        .unwrap_err();
        assert!(matches!(&missing, ToolError::Failed(m) if m.contains("no structuredContent")));
    }
}
