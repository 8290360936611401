//! Tool calls a model writes as text (`tool_calls = "native" | "text" | "auto"`), replayed from
//! responses recorded from a real local model (tests/fixtures/text_calls, see its MANIFEST).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure report

use std::path::Path;
use std::sync::Arc;

use anvil_agent::file_access::FileAccess;
use anvil_agent::text_calls::{RECOVERED_META, ToolCallMode};
use anvil_agent::tools::{
    edit_file::EditFile, glob::GlobTool, read_file::ReadFile, write_file::WriteFile,
};
use anvil_agent::{Agent, AgentConfig, AgentEvent, EventSink, ToolRegistry, TurnOutcome};
use anvil_llm::testing::{ScriptedProvider, script};
use anvil_llm::{ContentBlock, Role, validate_transcript};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// A recorded response text.
fn recorded(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/text_calls")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

struct Run {
    agent: Agent,
    provider: Arc<ScriptedProvider>,
    events: mpsc::Receiver<AgentEvent>,
    outcome: TurnOutcome,
    dir: tempfile::TempDir,
}

/// One turn in an empty workspace offering read_file, write_file and edit_file, the model
/// answering with
/// `responses` in order.
async fn turn(mode: ToolCallMode, responses: Vec<Vec<anvil_llm::StreamEvent>>) -> Run {
    turn_in(
        mode,
        responses,
        |_| {},
        "Create a file hello.txt containing hi",
    )
    .await
}

/// [`turn`] with `prompt`, in a workspace `prepare` fills first.
async fn turn_in(
    mode: ToolCallMode,
    responses: Vec<Vec<anvil_llm::StreamEvent>>,
    prepare: impl FnOnce(&Path),
    prompt: &str,
) -> Run {
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path());
    let access = Arc::new(FileAccess::workspace(dir.path()).unwrap());
    let mut tools = ToolRegistry::new();
    tools
        .register(Arc::new(ReadFile::new(Arc::clone(&access))))
        .unwrap();
    tools
        .register(Arc::new(WriteFile::new(Arc::clone(&access))))
        .unwrap();
    tools
        .register(Arc::new(EditFile::new(Arc::clone(&access))))
        .unwrap();
    tools.register(Arc::new(GlobTool::new(access))).unwrap();
    let provider = Arc::new(ScriptedProvider::new(responses));
    let (sink, events) = EventSink::channel(1024);
    let mut agent = Agent::new(
        provider.clone(),
        Arc::new(tools),
        AgentConfig {
            model: "qwen".into(),
            max_steps: 5,
            tool_calls: mode,
            ..AgentConfig::default()
        },
        dir.path(),
        sink,
    );
    let outcome = agent
        .run_turn(vec![ContentBlock::text(prompt)], CancellationToken::new())
        .await;
    Run {
        agent,
        provider,
        events,
        outcome,
        dir,
    }
}

fn hints(rx: &mut mpsc::Receiver<AgentEvent>) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        if let AgentEvent::Hint { message } = e {
            out.push(message);
        }
    }
    out
}

#[tokio::test]
async fn with_text_a_recorded_fenced_json_call_runs_and_the_transcript_says_it_was_recovered() {
    let text = recorded("call-qwen-fenced-edit-file.txt");
    let mut run = turn(
        ToolCallMode::Text,
        vec![script::text(&text), script::text("I could not edit it.")],
    )
    .await;
    assert_eq!(run.outcome, TurnOutcome::Done);

    // The assistant text is kept, the call added as a call block with a canonical id and a
    // meta naming how it was written; its result follows; the transcript is valid.
    let messages = run.agent.messages();
    assert_eq!(messages.len(), 4, "{messages:#?}");
    let assistant = &messages[1];
    assert_eq!(assistant.role, Role::Assistant);
    assert_eq!(assistant.text(), text);
    let calls: Vec<_> = assistant
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
                meta,
            } => Some((id, name, arguments, meta)),
            _ => None,
        })
        .collect();
    assert_eq!(calls.len(), 1);
    let (id, name, arguments, meta) = calls[0];
    assert_eq!(name, "edit_file");
    assert_eq!(arguments["new_string"], "hello");
    assert_eq!(id, "anvil_text_1_1");
    let meta = meta.as_ref().unwrap();
    assert_eq!(meta.provider, RECOVERED_META);
    assert_eq!(meta.data["recovered_from"], "fenced_json");
    // It ran like any call: the recorded path is outside this workspace, so an error result.
    match &messages[2].content[0] {
        ContentBlock::ToolResult {
            call_id, is_error, ..
        } => {
            assert_eq!(call_id, id);
            assert!(is_error);
        }
        other => panic!("{other:?}"),
    }
    validate_transcript(messages, anvil_llm::Tail::Complete).unwrap();
    // The second request carried the recovered call back as an ordinary call.
    let second = &run.provider.requests()[1];
    assert!(second.messages[1].tool_calls().any(|c| c.id == id));
    assert!(hints(&mut run.events).is_empty());
}

#[tokio::test]
async fn with_text_a_write_call_in_the_recorded_shape_writes_the_file() {
    // The recorded shape, the call the task needed.
    let text = "```json\n{\n  \"name\": \"write_file\",\n  \"arguments\": {\n    \"file_path\": \"hello.txt\",\n    \"content\": \"hi\"\n  }\n}\n```";
    let run = turn(
        ToolCallMode::Text,
        vec![script::text(text), script::text("I created hello.txt.")],
    )
    .await;
    assert_eq!(run.outcome, TurnOutcome::Done);
    let written = std::fs::read_to_string(run.dir.path().join("hello.txt")).unwrap();
    assert_eq!(written, "hi");
    assert_eq!(run.agent.messages().len(), 4);
}

#[tokio::test]
async fn with_native_the_call_is_not_run_and_a_hint_names_the_setting() {
    let text = recorded("call-qwen-fenced-edit-file-2.txt");
    let mut run = turn(ToolCallMode::Native, vec![script::text(&text)]).await;
    assert_eq!(run.outcome, TurnOutcome::Done);
    assert_eq!(run.provider.requests().len(), 1);
    assert_eq!(run.agent.messages()[1].tool_calls().count(), 0);
    let hints = hints(&mut run.events);
    assert_eq!(hints.len(), 1, "{hints:?}");
    assert!(hints[0].contains("tool_calls = \"text\""), "{}", hints[0]);
    assert!(hints[0].contains("edit_file"), "{}", hints[0]);
}

#[tokio::test]
async fn with_native_an_ordinary_answer_gets_no_hint() {
    let mut run = turn(
        ToolCallMode::Native,
        vec![script::text(
            "Use this config:\n```json\n{\"name\": \"anvil\", \"version\": 1}\n```",
        )],
    )
    .await;
    assert_eq!(run.outcome, TurnOutcome::Done);
    assert!(hints(&mut run.events).is_empty());
}

#[tokio::test]
async fn auto_recovers_a_response_that_is_only_a_call_but_not_a_call_quoted_in_prose() {
    let text = "I'll create it.\n```json\n{\"name\": \"write_file\", \"arguments\": {\"file_path\": \"hello.txt\", \"content\": \"hi\"}}\n```\n";
    let run = turn(
        ToolCallMode::Auto,
        vec![script::text(text), script::text("Done.")],
    )
    .await;
    assert!(run.dir.path().join("hello.txt").exists());
    assert_eq!(run.provider.requests().len(), 2);

    let quoted = format!("{text}\nRun the call above to create the file yourself.");
    let run = turn(ToolCallMode::Auto, vec![script::text(&quoted)]).await;
    assert_eq!(run.outcome, TurnOutcome::Done);
    assert!(!run.dir.path().join("hello.txt").exists());
    assert_eq!(run.provider.requests().len(), 1);

    // `text` runs it all the same.
    let run = turn(
        ToolCallMode::Text,
        vec![script::text(&quoted), script::text("Done.")],
    )
    .await;
    assert!(run.dir.path().join("hello.txt").exists());
}

#[tokio::test]
async fn a_recovered_call_with_arguments_that_break_the_schema_gets_an_error_result() {
    let text = "```json\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"hello.txt\"}}\n```";
    let run = turn(
        ToolCallMode::Text,
        vec![script::text(text), script::text("Sorry.")],
    )
    .await;
    assert_eq!(run.outcome, TurnOutcome::Done);
    assert!(!run.dir.path().join("hello.txt").exists());
    match &run.agent.messages()[2].content[0] {
        ContentBlock::ToolResult { is_error, .. } => assert!(is_error),
        other => panic!("{other:?}"),
    }
    // The model saw the error and could answer.
    assert_eq!(run.provider.requests().len(), 2);
}

#[tokio::test]
async fn a_call_to_a_tool_not_offered_is_never_run() {
    let text = "```json\n{\"name\": \"bash\", \"arguments\": {\"command\": \"touch pwned\"}}\n```";
    let mut run = turn(ToolCallMode::Text, vec![script::text(text)]).await;
    assert_eq!(run.outcome, TurnOutcome::Done);
    assert_eq!(run.agent.messages()[1].tool_calls().count(), 0);
    assert_eq!(run.provider.requests().len(), 1);
    assert!(hints(&mut run.events).is_empty());
}

#[tokio::test]
async fn every_recorded_response_is_recovered_or_left_alone_as_its_manifest_says() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/text_calls");
    let manifest = recorded("MANIFEST");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let file = entry.unwrap().file_name().into_string().unwrap();
        let is_call = file.starts_with("call-");
        if !(is_call || file.starts_with("nocall-")) {
            continue;
        }
        assert!(manifest.contains(&file), "{file} is not in the MANIFEST");
        let text = recorded(&file);
        let mut run = turn(
            ToolCallMode::Text,
            vec![script::text(&text), script::text("Done.")],
        )
        .await;
        assert_eq!(run.outcome, TurnOutcome::Done, "{file}");
        let recovered = run.agent.messages()[1].tool_calls().count();
        assert_eq!(recovered >= 1, is_call, "{file}: {text:?}");
        let native = turn(ToolCallMode::Native, vec![script::text(&text)]).await;
        let mut events = native.events;
        assert_eq!(!hints(&mut events).is_empty(), is_call, "{file}");
        let _ = hints(&mut run.events);
        checked += 1;
    }
    assert!(checked >= 3, "{checked} recordings");
}

#[tokio::test]
async fn parameter_tags_write_json_text_as_text_and_type_only_what_the_schema_types() {
    // Qwen3-Coder's shape: every value is text; a file's content that looks like JSON stays
    // text (write_file's content is a string), replace_all (a boolean) is typed.
    let text = "<tool_call>\n<function=write_file>\n<parameter=file_path>\npackage.json\n</parameter>\n<parameter=content>\n{\"name\": \"demo\"}\n</parameter>\n</function>\n</tool_call>";
    let run = turn(
        ToolCallMode::Auto,
        vec![script::text(text), script::text("Done.")],
    )
    .await;
    assert_eq!(run.outcome, TurnOutcome::Done);
    let written = std::fs::read_to_string(run.dir.path().join("package.json")).unwrap();
    assert_eq!(written, "{\"name\": \"demo\"}");
}

#[tokio::test]
async fn under_text_the_system_prompt_says_how_to_write_a_call_and_only_then() {
    use anvil_agent::text_calls::INSTRUCTIONS;
    for (mode, expected) in [
        (ToolCallMode::Native, "base\n".to_owned()),
        (ToolCallMode::Auto, "base\n".to_owned()),
        (ToolCallMode::Text, format!("base\n\n{INSTRUCTIONS}")),
    ] {
        let provider = Arc::new(ScriptedProvider::new(vec![
            script::text("one"),
            script::text("two"),
        ]));
        let (sink, _events) = EventSink::channel(64);
        let mut agent = Agent::new(
            provider.clone(),
            Arc::new(ToolRegistry::new()),
            AgentConfig {
                model: "qwen".into(),
                system: Some("base\n".into()),
                tool_calls: mode,
                ..AgentConfig::default()
            },
            tempfile::tempdir().unwrap().path(),
            sink,
        );
        agent
            .run_turn(vec![ContentBlock::text("hi")], CancellationToken::new())
            .await;
        let system = provider.requests()[0].system.clone();
        assert_eq!(system.as_deref(), Some(expected.as_str()), "{mode:?}");
        // Switching models switches the instructions with them (the REPL's /model).
        let other = if mode == ToolCallMode::Text {
            ToolCallMode::Native
        } else {
            ToolCallMode::Text
        };
        agent.set_tool_calls(other);
        agent
            .run_turn(vec![ContentBlock::text("again")], CancellationToken::new())
            .await;
        let system = provider.requests()[1].system.clone().unwrap();
        assert_eq!(
            system.contains("# Making tool calls"),
            other == ToolCallMode::Text,
            "{mode:?} → {other:?}"
        );
    }
}

#[tokio::test]
async fn a_schema_keyword_copied_into_the_arguments_is_dropped_and_the_transcript_says_so() {
    let text = recorded("call-qwen-fenced-write-file-schema-keyword.txt");
    let run = turn(
        ToolCallMode::Text,
        vec![script::text(&text), script::text("Done.")],
    )
    .await;
    assert_eq!(run.outcome, TurnOutcome::Done);
    let written = std::fs::read_to_string(run.dir.path().join("hello.txt")).unwrap();
    assert_eq!(written, "hello");
    let call = run.agent.messages()[1]
        .content
        .iter()
        .find_map(|b| match b {
            ContentBlock::ToolCall {
                arguments, meta, ..
            } => Some((arguments.clone(), meta.clone().unwrap())),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        call.0,
        serde_json::json!({"file_path": "./hello.txt", "content": "hello"})
    );
    assert_eq!(
        call.1.data,
        serde_json::json!({"recovered_from": "fenced_json", "dropped_schema_keys": ["required"]})
    );
}

#[tokio::test]
async fn a_misspelt_parameter_is_kept_for_the_schema_check_to_refuse() {
    // Only JSON Schema's own words are dropped: `contents` for `content` must not become a
    // write of nothing, nor `replace_al` an edit of the first match only.
    let text = "```json\n{\"name\": \"write_file\", \"arguments\": {\"file_path\": \"a.txt\", \"content\": \"x\", \"contents\": \"y\"}}\n```";
    let run = turn(
        ToolCallMode::Text,
        vec![script::text(text), script::text("Done.")],
    )
    .await;
    assert!(!run.dir.path().join("a.txt").exists());
    match &run.agent.messages()[2].content[0] {
        ContentBlock::ToolResult {
            is_error, content, ..
        } => {
            assert!(is_error);
            assert!(format!("{content:?}").contains("contents"), "{content:?}");
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_instructions_example_is_a_valid_call_that_lists_the_workspace() {
    // The example the system prompt shows under `text` must be a call the real tool accepts,
    // and one worth copying as it stands: a small model copies it verbatim.
    let mut run = turn_in(
        ToolCallMode::Text,
        vec![
            script::text(anvil_agent::text_calls::INSTRUCTIONS),
            script::text("Done."),
        ],
        |dir| {
            std::fs::create_dir_all(dir.join("src")).unwrap();
            std::fs::write(dir.join("src/main.py"), "print('hi')\n").unwrap();
        },
        "read it",
    )
    .await;
    assert_eq!(run.outcome, TurnOutcome::Done);
    match &run.agent.messages()[2].content[0] {
        ContentBlock::ToolResult {
            is_error, content, ..
        } => {
            assert!(!is_error, "{content:?}");
            assert!(
                format!("{content:?}").contains("src/main.py"),
                "{content:?}"
            );
        }
        other => panic!("{other:?}"),
    }
    let _ = hints(&mut run.events);
}

#[tokio::test]
async fn under_text_a_call_repeating_the_previous_steps_runs_and_its_result_says_so() {
    let write = "```json\n{\"name\": \"write_file\", \"arguments\": {\"file_path\": \"hello.txt\", \"content\": \"hi\"}}\n```";
    let other = "```json\n{\"name\": \"write_file\", \"arguments\": {\"file_path\": \"hello.txt\", \"content\": \"hi!\"}}\n```";
    let results = |run: &Run| -> Vec<String> {
        run.agent
            .messages()
            .iter()
            .flat_map(|m| &m.content)
            .filter_map(|b| match b {
                ContentBlock::ToolResult { content, .. } => Some(content.clone()),
                _ => None,
            })
            .collect()
    };
    use anvil_agent::text_calls::REPEATED_NOTE;
    let run = turn(
        ToolCallMode::Text,
        vec![
            script::text(write),
            script::text(write),
            script::text(other),
            script::text("Done."),
            // The next turn's.
            script::text(write),
            script::text("Done."),
        ],
    )
    .await;
    assert_eq!(run.outcome, TurnOutcome::Done);
    let r = results(&run);
    assert_eq!(r.len(), 3, "{r:?}");
    assert!(!r[0].contains(REPEATED_NOTE), "{r:?}");
    assert!(
        r[1].ends_with(REPEATED_NOTE),
        "the repeat ran and says so: {r:?}"
    );
    assert!(r[1].starts_with("Overwrote"), "{r:?}");
    assert!(!r[2].contains(REPEATED_NOTE), "other arguments: {r:?}");
    assert_eq!(
        std::fs::read_to_string(run.dir.path().join("hello.txt")).unwrap(),
        "hi!"
    );

    // A new turn starts afresh: its first call is never "repeated".
    let mut run = run;
    run.agent
        .run_turn(vec![ContentBlock::text("again")], CancellationToken::new())
        .await;
    let r = results(&run);
    assert!(!r.last().unwrap().contains(REPEATED_NOTE), "{r:?}");
}
