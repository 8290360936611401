//! Tool input schemas for targets that cannot take full JSON Schema.
//!
//! [`legacy_schema`] compiles a JSON Schema into Gemini's legacy `parameters` dialect (an
//! OpenAPI 3.0 subset). It is deliberately limited; everything it does not list is rejected with
//! the path where it occurs, never approximated:
//!
//! - `type` as one name; `["T", "null"]` becomes `T` + `nullable: true`;
//! - `anyOf` / `oneOf` of exactly one schema and `{"type": "null"}` becomes that schema +
//!   `nullable`;
//! - `properties` (names preserved exactly: a property called `title` or `type` is a property),
//!   `required`, `items`, `enum`, `const` (as a one-value `enum`), `description`, `format`,
//!   `minimum`, `maximum`, `minItems`, `maxItems`, `minLength`, `maxLength`, `pattern`;
//! - dropped as annotations: `$schema`, `$id`, `title`, `default`, `examples`, `$comment`,
//!   `additionalProperties`, `deprecated`, `readOnly`, `writeOnly`.
//!
//! Rejected: `$ref` / `$defs` / `definitions` (resolve references before compiling), any other
//! union (`["string", "integer"]` is never narrowed to one of its members), `allOf`, `not`,
//! conditionals, and unknown keywords.

use serde_json::{Map, Value, json};

/// Why a schema cannot be expressed, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct SchemaError {
    /// A JSON path into the schema, e.g. `$.properties.city.type`.
    pub path: String,
    pub reason: String,
}

fn err(path: &str, reason: impl Into<String>) -> SchemaError {
    SchemaError {
        path: path.to_string(),
        reason: reason.into(),
    }
}

const TYPES: [&str; 6] = ["string", "number", "integer", "boolean", "array", "object"];
const KEPT: [&str; 8] = [
    "description",
    "format",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
];
const DROPPED: [&str; 10] = [
    "$schema",
    "$id",
    "title",
    "default",
    "examples",
    "$comment",
    "additionalProperties",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// Compiles `schema` into the legacy subset (see the module docs).
pub fn legacy_schema(schema: &Value) -> Result<Value, SchemaError> {
    compile(schema, "$")
}

fn compile(schema: &Value, path: &str) -> Result<Value, SchemaError> {
    let Some(obj) = schema.as_object() else {
        return match schema {
            // `true` accepts anything: there is no subset spelling for that.
            Value::Bool(_) => Err(err(
                path,
                "boolean schemas are not supported by the legacy dialect",
            )),
            _ => Err(err(path, "a schema must be an object")),
        };
    };
    // A nullable union: one real schema plus null.
    for key in ["anyOf", "oneOf"] {
        if let Some(options) = obj.get(key) {
            let here = format!("{path}.{key}");
            let options = options
                .as_array()
                .ok_or_else(|| err(&here, "must be an array"))?;
            let non_null: Vec<&Value> = options.iter().filter(|o| !is_null_schema(o)).collect();
            let has_null = non_null.len() < options.len();
            return match non_null.as_slice() {
                [only] => {
                    let mut out = compile(only, &format!("{here}[0]"))?;
                    if let Some(o) = out.as_object_mut() {
                        if has_null {
                            o.insert("nullable".into(), json!(true));
                        }
                        if let Some(d) = obj.get("description") {
                            o.entry("description").or_insert(d.clone());
                        }
                    }
                    Ok(out)
                }
                _ => Err(err(
                    &here,
                    format!(
                        "a union of {} schemas cannot be expressed in the legacy dialect; only `T or null` can",
                        non_null.len()
                    ),
                )),
            };
        }
    }
    let mut out = Map::new();
    for (key, value) in obj {
        let here = format!("{path}.{key}");
        match key.as_str() {
            "type" => match value {
                Value::String(t) if TYPES.contains(&t.as_str()) => {
                    out.insert("type".into(), json!(t));
                }
                Value::String(t) if t == "null" => {
                    return Err(err(
                        &here,
                        "a schema of type null alone cannot be expressed",
                    ));
                }
                Value::Array(types) => {
                    let names: Vec<&str> = types.iter().filter_map(Value::as_str).collect();
                    let non_null: Vec<&str> =
                        names.iter().copied().filter(|t| *t != "null").collect();
                    match non_null.as_slice() {
                        [t] if TYPES.contains(t) => {
                            out.insert("type".into(), json!(t));
                            if names.len() > 1 {
                                out.insert("nullable".into(), json!(true));
                            }
                        }
                        _ => {
                            return Err(err(
                                &here,
                                format!(
                                    "the union {names:?} cannot be expressed in the legacy dialect (it would have to be narrowed to one type)"
                                ),
                            ));
                        }
                    }
                }
                other => return Err(err(&here, format!("unsupported type {other}"))),
            },
            "properties" => {
                let props = value
                    .as_object()
                    .ok_or_else(|| err(&here, "must be an object"))?;
                let mut compiled = Map::new();
                for (name, prop) in props {
                    compiled.insert(name.clone(), compile(prop, &format!("{here}.{name}"))?);
                }
                out.insert("properties".into(), Value::Object(compiled));
            }
            "items" => {
                out.insert("items".into(), compile(value, &here)?);
            }
            "required" | "enum" => {
                out.insert(key.clone(), value.clone());
            }
            "const" => {
                out.insert("enum".into(), json!([value]));
            }
            "pattern" => {
                out.insert(key.clone(), value.clone());
            }
            "$ref" | "$defs" | "definitions" => {
                return Err(err(
                    &here,
                    "references are not supported by the legacy dialect; resolve them first or use the full JSON Schema dialect",
                ));
            }
            k if KEPT.contains(&k) => {
                out.insert(key.clone(), value.clone());
            }
            k if DROPPED.contains(&k) => {}
            other => {
                return Err(err(
                    &here,
                    format!("keyword `{other}` is not supported by the legacy dialect"),
                ));
            }
        }
    }
    if !out.contains_key("type") && out.contains_key("properties") {
        out.insert("type".into(), json!("object"));
    }
    Ok(Value::Object(out))
}

fn is_null_schema(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("null")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(dead_code)] // read through the derived schema
    #[derive(schemars::JsonSchema)]
    /// Arguments of a search tool.
    struct SearchArgs {
        /// What to look for.
        query: Option<String>,
        /// Line numbers to include.
        lines: Vec<u32>,
    }

    #[test]
    fn schemars_option_and_vec_snapshot() {
        let schema = serde_json::to_value(schemars::schema_for!(SearchArgs)).unwrap();
        insta::assert_json_snapshot!(legacy_schema(&schema).unwrap());
    }

    #[test]
    fn a_property_named_title_stays_present_and_required() {
        let schema = json!({
            "title": "CreateIssue",
            "type": "object",
            "properties": {
                "title": {"type": "string", "title": "Title"},
                "body": {"type": "string"}
            },
            "required": ["title"]
        });
        let out = legacy_schema(&schema).unwrap();
        assert_eq!(
            out,
            json!({
                "type": "object",
                "properties": {"title": {"type": "string"}, "body": {"type": "string"}},
                "required": ["title"]
            })
        );
    }

    #[test]
    fn string_or_integer_is_rejected_not_narrowed() {
        let schema =
            json!({"type": "object", "properties": {"id": {"type": ["string", "integer"]}}});
        let e = legacy_schema(&schema).unwrap_err();
        assert_eq!(e.path, "$.properties.id.type");
        let schema = json!({"type": "object", "properties": {"id": {"anyOf": [{"type": "string"}, {"type": "integer"}]}}});
        assert_eq!(
            legacy_schema(&schema).unwrap_err().path,
            "$.properties.id.anyOf"
        );
    }

    #[test]
    fn references_are_rejected_with_a_path() {
        let schema = json!({
            "type": "object",
            "properties": {"point": {"$ref": "#/$defs/Point"}},
            "$defs": {"Point": {"type": "object"}}
        });
        let e = legacy_schema(&schema).unwrap_err();
        assert!(
            e.path == "$.properties.point.$ref" || e.path == "$.$defs",
            "{e}"
        );
        assert!(e.to_string().contains("references are not supported"));
    }

    #[test]
    fn nullable_unions_and_const() {
        let schema = json!({"anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}], "description": "n"});
        assert_eq!(
            legacy_schema(&schema).unwrap(),
            json!({"type": "integer", "minimum": 0, "nullable": true, "description": "n"})
        );
        assert_eq!(
            legacy_schema(&json!({"const": "x"})).unwrap(),
            json!({"enum": ["x"]})
        );
    }

    #[test]
    fn unknown_keywords_are_rejected() {
        let e = legacy_schema(&json!({"type": "object", "if": {}})).unwrap_err();
        assert_eq!(e.path, "$.if");
    }
}
