//! The interactive elicitor: an MCP server asks the user for input mid-call. Shows the
//! server's message, reads each field of the requested schema (Enter takes its default), then
//! `[a]ccept`, `[d]ecline` or `[c]ancel`. Like the approval prompt, it borrows the terminal
//! from the renderer; anything that keeps an answer from being read declines.

use anvil_agent::mcp::{ElicitAnswer, Elicitation, Elicitor, client::defaults};
use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;
use serde_json::Value;

use crate::cli::render::{Screen, Style, printable, visible};

pub struct InteractiveElicitor {
    style: Style,
    screen: Screen,
}

impl InteractiveElicitor {
    pub fn new(style: Style, screen: Screen) -> Self {
        Self { style, screen }
    }
}

#[async_trait::async_trait]
impl Elicitor for InteractiveElicitor {
    async fn elicit(&self, request: Elicitation) -> ElicitAnswer {
        let style = self.style;
        let lease = self.screen.borrow().await;
        tokio::task::spawn_blocking(move || {
            let answer = ask(&request, style);
            drop(lease);
            answer
        })
        .await
        .unwrap_or(ElicitAnswer::Cancel)
    }
}

fn ask(request: &Elicitation, style: Style) -> ElicitAnswer {
    eprintln!();
    eprintln!(
        "{}",
        style.yellow(&format!(
            "⏵ MCP server '{}' asks: {}",
            request.server,
            printable(&request.message)
        ))
    );
    let Ok(mut editor) = DefaultEditor::new() else {
        return ElicitAnswer::Decline;
    };
    let mut content = defaults(&request.schema);
    let props = request
        .schema
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for (name, prop) in &props {
        let kind = prop.get("type").and_then(Value::as_str).unwrap_or("string");
        let hint = match (prop.get("enum"), content.get(name)) {
            (Some(Value::Array(options)), _) => format!(
                " ({})",
                options
                    .iter()
                    .map(|o| o.as_str().map(str::to_string).unwrap_or(o.to_string()))
                    .collect::<Vec<_>>()
                    .join("/")
            ),
            (_, Some(default)) => format!(" [{default}]"),
            _ => String::new(),
        };
        let label = prop
            .get("title")
            .or_else(|| prop.get("description"))
            .and_then(Value::as_str)
            .unwrap_or(name);
        loop {
            match editor.readline(&visible(&format!("  {label}{hint} › "))) {
                Ok(line) if line.trim().is_empty() => break,
                Ok(line) => match parse(line.trim(), kind) {
                    Some(v) => {
                        content.insert(name.clone(), v);
                        break;
                    }
                    None => eprintln!("  expected a {kind}"),
                },
                Err(ReadlineError::Interrupted) => return ElicitAnswer::Cancel,
                Err(_) => return ElicitAnswer::Decline,
            }
        }
    }
    loop {
        match editor.readline("  [a]ccept  [d]ecline  [c]ancel › ") {
            Ok(l) => match l.trim().to_ascii_lowercase().as_str() {
                "a" | "accept" | "y" | "yes" => return ElicitAnswer::Accept(content),
                "d" | "decline" | "n" | "no" => return ElicitAnswer::Decline,
                "c" | "cancel" => return ElicitAnswer::Cancel,
                _ => eprintln!("  answer a, d or c"),
            },
            Err(ReadlineError::Interrupted) => return ElicitAnswer::Cancel,
            Err(_) => return ElicitAnswer::Decline,
        }
    }
}

/// One typed field value from what the user wrote.
fn parse(text: &str, kind: &str) -> Option<Value> {
    match kind {
        "integer" => text.parse::<i64>().ok().map(Value::from),
        "number" => text.parse::<f64>().ok().map(Value::from),
        "boolean" => match text.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" => Some(Value::Bool(true)),
            "n" | "no" | "false" => Some(Value::Bool(false)),
            _ => None,
        },
        _ => Some(Value::String(text.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_parsed_by_type() {
        assert_eq!(parse("3", "integer"), Some(Value::from(3)));
        assert_eq!(parse("x", "integer"), None);
        assert_eq!(parse("2.5", "number"), Some(Value::from(2.5)));
        assert_eq!(parse("yes", "boolean"), Some(Value::Bool(true)));
        assert_eq!(parse("hi", "string"), Some(Value::from("hi")));
    }
}
