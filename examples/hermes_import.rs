//! Importing the conversation journals of the Hermes agent's A2A plugin (one
//! `<context>.jsonl` file per context), then reading a context back as a
//! prompt would see it.
//!
//! ```sh
//! cargo run --example hermes_import                       # a sample journal
//! cargo run --example hermes_import -- ~/.hermes/a2a_conversations
//! ```

use ctxlog::render::Budget;
use ctxlog::{import_hermes, Options, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let scratch = std::env::temp_dir().join(format!("ctxlog-hermes-{}", std::process::id()));
    let sample = std::env::args_os().nth(1).is_none();
    let journals = match std::env::args_os().nth(1) {
        Some(dir) => std::path::PathBuf::from(dir),
        None => {
            // A sample journal: one context, two turns, and a torn last line.
            let dir = scratch.join("journals");
            std::fs::create_dir_all(&dir)?;
            std::fs::write(
                dir.join("billing-42.jsonl"),
                concat!(
                    r#"{"ts":"2026-11-30T09:00:00Z","role":"user","text":"Why was I charged twice?","task_id":"t1"}"#,
                    "\n",
                    r#"{"ts":"2026-11-30T09:00:05Z","role":"agent","text":"One charge is a hold; it drops in 3 days.","task_id":"t1"}"#,
                    "\n",
                    r#"{"ts":"2026-11-30T09:01"#,
                ),
            )?;
            dir
        }
    };
    let store = Store::open(scratch.join("store"), Options::default())?;
    // The tenant is named by the caller: file names cannot prove whose a
    // journal is.
    let report = import_hermes(&store, "acme", &journals, &mut |done, of| {
        eprintln!("read {done} of {of} journal byte(s)")
    })?;
    println!(
        "{} file(s), {} context(s), {} message(s), {} line(s) skipped",
        report.files, report.contexts, report.messages, report.skipped_lines
    );
    if sample {
        assert_eq!((report.messages, report.skipped_lines), (2, 1));
    }
    let page = store.list_contexts("acme", 10, None)?;
    if let Some(context) = page.contexts.first() {
        let history = store.render_history("acme", &context.context_id, None, Budget::default())?;
        println!("\ncontext {}:\n{}", context.context_id, history.text);
    }
    store.close()?;
    std::fs::remove_dir_all(&scratch)?;
    Ok(())
}
