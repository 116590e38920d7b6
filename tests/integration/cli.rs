//! What users of a CLI expect, offline: completions a real bash runs, man pages groff reads
//! without a warning, --version with the commit, -q and -v, `-` for standard input, a --format a
//! command cannot print refused, exit codes for a CI gate, and the README's install section.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::support::{self, hopper, text};

const SPEC: &str = "[topology.orders]\ndelays = [\"5s\", \"30s\"]\nidempotency_key = \"message_id\"\n";

/// A spec file of its own, removed on drop.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(test: &str) -> Scratch {
        let dir = std::env::temp_dir().join(support::unique(&format!("hopper-cli-{test}")));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn file(&self, name: &str, text: &str) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// hopper with `stdin` on its standard input, no broker in its environment.
fn hopper_stdin(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hopper"))
        .args(args)
        .env("NO_COLOR", "1")
        .env_remove("HOPPER_AMQP_URL")
        .env_remove("HOPPER_MANAGEMENT_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // hopper may refuse before it reads (`- -`): a closed pipe here is its answer, not a failure.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    let out = child.wait_with_output().unwrap();
    eprintln!("$ hopper {} < stdin\n{}{}", args.join(" "), text(&out.stdout), text(&out.stderr));
    out
}

// ---------------------------------------------------------------------------------------------
// Completions and man pages
// ---------------------------------------------------------------------------------------------

/// bash loads the script and completes `hopper ap` to `apply`, and apply's new flags.
#[test]
fn bash_completion_completes_commands_and_flags() {
    let out = hopper(None, &["completions", "bash"]);
    assert_eq!(out.status.code(), Some(0));
    let scratch = Scratch::new("completions");
    let script = scratch.file("hopper.bash", &text(&out.stdout));
    let complete = |words: &str, index: usize| -> String {
        let program = format!(
            "source {script}\nCOMP_WORDS=({words})\nCOMP_CWORD={index}\nCOMP_LINE='{words}'\nCOMP_POINT=${{#COMP_LINE}}\n_hopper hopper \"${{COMP_WORDS[$COMP_CWORD]}}\" \"${{COMP_WORDS[$COMP_CWORD-1]}}\"\nprintf '%s\\n' \"${{COMPREPLY[@]}}\""
        );
        let out = Command::new("bash").arg("-c").arg(program).output().expect("bash");
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    assert_eq!(complete("hopper ap", 1).trim(), "apply");
    let flags = complete("hopper apply --de", 2);
    assert!(flags.lines().any(|l| l == "--detailed-exitcode"), "{flags}");
    let shells = complete("hopper completions ''", 2);
    for shell in ["bash", "zsh", "fish", "powershell"] {
        assert!(shells.lines().any(|l| l == shell), "{shell} missing: {shells}");
    }
}

/// Each shell's script names every command; bash's is the one a test runs (the others' shells
/// are not installed here).
#[test]
fn completions_for_every_shell_name_every_command() {
    for (shell, marker) in
        [("zsh", "#compdef hopper"), ("fish", "complete -c hopper"), ("powershell", "Register-ArgumentCompleter")]
    {
        let out = hopper(None, &["completions", shell]);
        assert_eq!(out.status.code(), Some(0));
        let script = text(&out.stdout);
        assert!(script.contains(marker), "{shell}: {marker} missing");
        for command in ["apply", "diff", "schema", "completions", "man"] {
            assert!(script.contains(command), "{shell}: {command} missing");
        }
    }
    let out = hopper(None, &["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("possible values"), "{}", text(&out.stderr));
}

/// groff formats every page without a warning; each command has its own page with its flags.
#[test]
fn man_pages_render_with_groff() {
    let scratch = Scratch::new("man");
    let dir = scratch.0.join("man1");
    let out = hopper(None, &["man", "--out-dir", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let mut pages: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    pages.sort();
    let expected = [
        "hopper-apply.1",
        "hopper-compile.1",
        "hopper-completions.1",
        "hopper-config.1",
        "hopper-contract.1",
        "hopper-diff.1",
        "hopper-export.1",
        "hopper-graph.1",
        "hopper-inspect.1",
        "hopper-lint.1",
        "hopper-man.1",
        "hopper-redrive.1",
        "hopper-schedule.1",
        "hopper-schema.1",
        "hopper.1",
    ];
    assert_eq!(pages, expected);
    for page in &pages {
        let out = Command::new("groff")
            .args(["-man", "-Tutf8", "-P-cbou", "-ww", "-Wbreak"])
            .arg(dir.join(page))
            .output()
            .expect("groff");
        assert!(out.status.success() && out.stderr.is_empty(), "{page}: {}", text(&out.stderr));
        let shown = text(&out.stdout);
        assert!(shown.contains("NAME") && shown.contains("SYNOPSIS"), "{page}: {shown}");
    }
    let apply = text(&hopper(None, &["man", "apply"]).stdout);
    assert!(apply.contains(".TH HOPPER-APPLY 1"), "{apply}");
    for flag in [r"\-\-detailed\-exitcode", r"\-\-plan", r"\-\-quiet", r"\-\-format"] {
        assert!(apply.contains(flag), "{flag} missing from hopper-apply(1)");
    }
    assert_eq!(apply, std::fs::read_to_string(dir.join("hopper-apply.1")).unwrap());
    let unknown = hopper(None, &["man", "deploy"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(text(&unknown.stderr).contains("hopper has no command `deploy`"), "{}", text(&unknown.stderr));
}

// ---------------------------------------------------------------------------------------------
// --version
// ---------------------------------------------------------------------------------------------

/// Built from this checkout, the version names its commit.
#[test]
fn version_names_the_commit() {
    let out = hopper(None, &["--version"]);
    assert_eq!(out.status.code(), Some(0));
    let version = text(&out.stdout);
    let head = Command::new("git")
        .args(["-C", env!("CARGO_MANIFEST_DIR"), "rev-parse", "--short", "HEAD"])
        .output()
        .expect("the tests run in a git checkout");
    let head = text(&head.stdout).trim().to_string();
    assert!(!head.is_empty());
    assert_eq!(version.trim(), format!("hopper {} (commit {head})", env!("CARGO_PKG_VERSION")));
}

/// Outside a checkout (a tarball), or a tarball unpacked inside another repository, the build
/// says the commit is unknown rather than fail or name another project's commit.
#[test]
fn version_outside_a_checkout_says_so() {
    use crate::build_commit::find;
    let scratch = Scratch::new("tarball");
    let found = find(&scratch.0);
    assert_eq!(found.commit, None);
    assert_eq!(found.version_text(), "commit unknown: not built from a git checkout");

    let git = |dir: &Path, args: &[&str]| {
        let out = Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", text(&out.stderr));
        text(&out.stdout).trim().to_string()
    };
    let outer = scratch.0.join("outer");
    let unpacked = outer.join("vendor").join("hopper");
    std::fs::create_dir_all(&unpacked).unwrap();
    git(&outer, &["init", "-q"]);
    git(&outer, &["commit", "-q", "--allow-empty", "-m", "outer"]);
    assert_eq!(find(&unpacked).commit, None, "not the outer repository's commit");
    let own = find(&outer);
    assert_eq!(own.commit, Some(git(&outer, &["rev-parse", "--short", "HEAD"])));
    assert!(own.watch.iter().any(|p| p.ends_with("HEAD")), "rebuilt when HEAD moves: {:?}", own.watch);
}

// ---------------------------------------------------------------------------------------------
// -q, -v
// ---------------------------------------------------------------------------------------------

/// -q: nothing for people on stdout, but machine output and errors as ever.
#[test]
fn quiet_prints_only_errors_and_machine_output() {
    let scratch = Scratch::new("quiet");
    let spec = scratch.file("orders.toml", SPEC);
    for command in ["compile", "contract", "lint"] {
        let out = hopper(None, &["-q", command, &spec]);
        assert_eq!(out.status.code(), Some(0), "{command}");
        assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{command} -q: {}", text(&out.stdout));
        let (code, json) = support::hopper_json(None, &[command, "-q", &spec]);
        assert_eq!((code, &json["schema_version"]), (Some(0), &Value::from(1)), "{command} -q --format json");
    }
    for machine in [&["export", &spec][..], &["graph", &spec], &["schema"], &["completions", "bash"], &["man"]] {
        let out = hopper(None, &[&["-q"][..], machine].concat());
        assert_eq!(out.status.code(), Some(0));
        assert!(!out.stdout.is_empty(), "{machine:?} -q printed nothing");
    }
    let bad = scratch.file("bad.toml", "[topology.orders]\ndelay = [\"5s\"]\n");
    let out = hopper(None, &["-q", "compile", &bad]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(text(&out.stderr).contains("unknown key `delay`"), "errors are still shown");
    let both = hopper(None, &["-q", "-v", "compile", &spec]);
    assert_eq!(both.status.code(), Some(2));
    assert!(text(&both.stderr).contains("cannot be used with"), "{}", text(&both.stderr));
}

/// -v: what hopper reads, on stderr; stdout as without it.
#[test]
fn verbose_says_what_hopper_reads() {
    let scratch = Scratch::new("verbose");
    let spec = scratch.file("orders.toml", SPEC);
    let plain = hopper(None, &["compile", &spec]);
    let verbose = hopper(None, &["-v", "compile", &spec]);
    assert_eq!(verbose.status.code(), Some(0));
    assert_eq!(verbose.stdout, plain.stdout, "-v never changes the output");
    assert!(plain.stderr.is_empty());
    let said = text(&verbose.stderr);
    assert!(said.contains(&format!("hopper: spec: 1 topologies read from {spec}")), "{said}");

    // A directory of many specs: the first five by name, then how many more.
    let many = Scratch::new("verbose-many");
    for i in 0..7 {
        many.file(&format!("t{i}.toml"), &SPEC.replace("orders", &format!("orders{i}")));
    }
    let dir = many.0.to_str().unwrap().to_string();
    let said = text(&hopper(None, &["-v", "compile", &dir]).stderr);
    let line = said.lines().find(|l| l.starts_with("hopper: spec:")).unwrap_or_default();
    assert!(line.starts_with("hopper: spec: 7 topologies read from "), "{said}");
    assert!(line.contains("t4.toml, and 2 more file(s)") && !line.contains("t5.toml"), "{line}");
}

// ---------------------------------------------------------------------------------------------
// Standard input
// ---------------------------------------------------------------------------------------------

#[test]
fn a_spec_on_standard_input() {
    let out = hopper_stdin(&["compile", "--format", "json", "-"], SPEC);
    assert_eq!(out.status.code(), Some(0));
    let compiled: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(compiled["topologies"][0]["topology"]["name"], "orders");
    // Diagnostics name it.
    let out = hopper_stdin(&["lint", "-"], "[topology.orders]\ndelays = [\"5s\"]\nqueue_type = \"stream\"\n");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("┌─ <stdin>:3:14"), "{}", text(&out.stderr));
    // Beside a file, and only once.
    let scratch = Scratch::new("stdin");
    let file = scratch.file("payments.toml", "[topology.payments]\ndelays = [\"1s\"]\n");
    let out = hopper_stdin(&["compile", "--format", "json", &file, "-"], SPEC);
    let compiled: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> =
        compiled["topologies"].as_array().unwrap().iter().map(|t| t["topology"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["payments", "orders"]);
    let twice = hopper_stdin(&["compile", "-", "-"], SPEC);
    assert_eq!(twice.status.code(), Some(2));
    assert!(text(&twice.stderr).contains("standard input) is named twice"), "{}", text(&twice.stderr));
}

// ---------------------------------------------------------------------------------------------
// Files given, files written
// ---------------------------------------------------------------------------------------------

/// One file named twice, by the same path, through `..`, a link, or a directory and a path in it,
/// is read once and said so; it is not "defined twice".
#[test]
fn the_same_file_named_twice_is_read_once() {
    let scratch = Scratch::new("twice");
    let file = scratch.file("orders.toml", SPEC);
    let dir = scratch.0.to_str().unwrap().to_string();
    let link = scratch.0.join("link.toml.lnk");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let dotted = format!("{dir}/../{}/orders.toml", scratch.0.file_name().unwrap().to_str().unwrap());
    let link = link.to_str().unwrap();
    for (args, says) in [
        (vec![file.as_str(), file.as_str()], format!("{file} is named twice; read once")),
        (vec![file.as_str(), dotted.as_str()], format!("{dotted} is the same file as {file}; read once")),
        (vec![file.as_str(), link], format!("{link} is the same file as {file}; read once")),
        (vec![dir.as_str(), file.as_str()], format!("{file} is named twice; read once")),
    ] {
        let mut all = vec!["compile", "--format", "json"];
        all.extend(&args);
        let out = hopper(None, &all);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", text(&out.stderr));
        let compiled: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(compiled["topologies"].as_array().unwrap().len(), 1, "{args:?}");
        assert!(text(&out.stderr).contains(&says), "{args:?}: {}", text(&out.stderr));
    }
    // A link beside its file in one directory given.
    let dir_with_link = Scratch::new("twice-dir");
    let target = dir_with_link.file("orders.toml", SPEC);
    std::os::unix::fs::symlink(&target, dir_with_link.0.join("orders-link.toml")).unwrap();
    let out = hopper(None, &["compile", "--format", "json", dir_with_link.0.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("orders-link.toml; read once"), "{}", text(&out.stderr));
    // -q: errors only.
    assert!(hopper(None, &["-q", "lint", &file, &file]).stderr.is_empty());
    // Two files that define the same topology are still two definitions.
    let copy = scratch.file("copy.toml", SPEC);
    let out = hopper(None, &["lint", &file, &copy]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("topology `orders` is defined twice"), "{}", text(&out.stderr));
}

/// hopper does not read a directory's subdirectories or `*.TOML` files, and says so; hidden
/// files and files of other kinds are passed over without a word.
#[test]
fn a_directory_says_what_it_did_not_read() {
    let scratch = Scratch::new("skipped");
    scratch.file("orders.toml", SPEC);
    scratch.file("Payments.TOML", "[topology.payments]\ndelays = [\"1s\"]\n");
    scratch.file("README.md", "specs");
    scratch.file(".#orders.toml", "not a spec");
    std::fs::create_dir(scratch.0.join("old")).unwrap();
    std::fs::write(scratch.0.join("old/legacy.toml"), "[topology.legacy]\ndelays = [\"1s\"]\n").unwrap();
    let dir = scratch.0.to_str().unwrap();
    let out = hopper(None, &["compile", "--format", "json", dir]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let compiled: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> =
        compiled["topologies"].as_array().unwrap().iter().map(|t| t["topology"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["orders"]);
    let said = text(&out.stderr);
    let notes: Vec<&str> = said.lines().filter(|l| l.starts_with("note: ")).collect();
    assert_eq!(notes.len(), 2, "{said}");
    assert!(
        said.contains(&format!("note: {dir}/Payments.TOML not read: spec files end in `.toml`, in lower case")),
        "{said}"
    );
    assert!(said.contains(&format!("note: {dir}/old not read: hopper does not read subdirectories")), "{said}");
    // Named, each is read.
    let out = hopper(None, &["compile", "--format", "json", &format!("{dir}/old"), &format!("{dir}/Payments.TOML")]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(serde_json::from_slice::<Value>(&out.stdout).unwrap()["topologies"].as_array().unwrap().len(), 2);
}

/// `apply --dry-run --out` never writes the plan over a spec file it reads (given by name, by
/// another path, or inside a directory given), and refuses before the broker is asked anything:
/// here no broker listens, so reaching it would be a connection error.
#[test]
fn a_plan_is_never_written_over_its_spec() {
    let scratch = Scratch::new("out");
    let file = scratch.file("orders.toml", SPEC);
    let dir = scratch.0.to_str().unwrap().to_string();
    let dotted = format!("{dir}/../{}/orders.toml", scratch.0.file_name().unwrap().to_str().unwrap());
    for (out_path, specs) in [
        (file.as_str(), vec![file.as_str()]),
        (dotted.as_str(), vec![file.as_str()]),
        (file.as_str(), vec![dir.as_str()]),
    ] {
        let mut args = vec!["apply", "--amqp-url", "amqp://guest:guest@127.0.0.1:1", "--dry-run", "--out", out_path];
        args.extend(&specs);
        let out = hopper(None, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let said = text(&out.stderr);
        assert!(said.contains(&format!("--out {out_path} would replace")), "{args:?}: {said}");
        assert!(said.contains("nothing was read or changed") && !said.contains("refused"), "{args:?}: {said}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), SPEC, "{args:?}: the spec was changed");
    }
    // A new *.toml in a spec directory would be read as a spec by the next run; a file of
    // another kind there is not a spec.
    let new_toml = format!("{dir}/plan.toml");
    let out =
        hopper(None, &["apply", "--amqp-url", "amqp://guest:guest@127.0.0.1:1", "--dry-run", "--out", &new_toml, &dir]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("which this run reads as specs"), "{}", text(&out.stderr));
    assert!(!Path::new(&new_toml).exists());
    scratch.file("README.md", "notes");
    let readme = format!("{dir}/README.md");
    let out =
        hopper(None, &["apply", "--amqp-url", "amqp://guest:guest@127.0.0.1:1", "--dry-run", "--out", &readme, &dir]);
    assert!(!text(&out.stderr).contains("--out"), "README.md is not a spec: {}", text(&out.stderr));
    // Another file is written as before, once the broker answers; here it cannot.
    let plan = scratch.0.join("plan.json");
    let out = hopper(
        None,
        &["apply", "--amqp-url", "amqp://guest:guest@127.0.0.1:1", "--dry-run", "--out", plan.to_str().unwrap(), &file],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(!text(&out.stderr).contains("would replace"), "{}", text(&out.stderr));
}

/// A vhost, topology or queue named `.` or `..` is refused wherever it is given: in the
/// management API's paths it names this or the parent directory, so `/api/queues/.` read every
/// vhost's queues (measured on 3.10.8), and `%2E%2E` is answered with a 301.
#[test]
fn dot_segment_names_are_refused() {
    let scratch = Scratch::new("dots");
    let spec = scratch.file("orders.toml", SPEC);
    for (file, text) in [
        ("vhost.toml", "vhost = \"..\"\n[topology.orders]\ndelays = [\"1s\"]\n"),
        ("topology.toml", "[topology.\".\"]\ndelays = [\"1s\"]\n"),
        ("queue.toml", "[topology.orders]\ndelays = [\"1s\"]\nqueue = \"..\"\n"),
    ] {
        let out = hopper(None, &["compile", &scratch.file(file, text)]);
        assert_eq!(out.status.code(), Some(2), "{file}");
        assert!(text_of(&out).contains("cannot be addressed through the management API"), "{file}: {}", text_of(&out));
    }
    for vhost in [".", ".."] {
        let out = hopper(None, &["compile", "--vhost", vhost, &spec]);
        assert_eq!(out.status.code(), Some(2), "--vhost {vhost}");
        assert!(text_of(&out).contains("cannot be addressed through the management API"), "{}", text_of(&out));
        let url = format!("amqp://guest:guest@127.0.0.1:1/{}", vhost.replace('.', "%2E"));
        let out = hopper(None, &["diff", "--amqp-url", &url, &spec]);
        assert_eq!(out.status.code(), Some(2), "{url}");
        assert!(text_of(&out).contains("cannot be addressed through the management API"), "{url}: {}", text_of(&out));
    }
}

fn text_of(out: &Output) -> String {
    text(&out.stderr)
}

/// `lint --broker-version` judges only the release lines hopper knows (3.10 to 4.3); another is
/// refused with the nearest one, not reported "Clean".
#[test]
fn a_broker_version_hopper_does_not_know_is_refused() {
    let scratch = Scratch::new("version");
    let spec = scratch.file("orders.toml", SPEC);
    for known in ["3.10", "3.10.8", "4.0.5", "4.3"] {
        let out = hopper(None, &["lint", "--broker-version", known, &spec]);
        assert_eq!(out.status.code(), Some(0), "{known}: {}", text(&out.stderr));
    }
    for (unknown, nearest) in [("3.9", "3.10"), ("2.8.1", "3.10"), ("4.4", "4.3"), ("5.0", "4.3")] {
        let out = hopper(None, &["lint", "--broker-version", unknown, &spec]);
        assert_eq!(out.status.code(), Some(2), "{unknown}");
        let said = text(&out.stderr);
        assert!(said.contains("hopper knows RabbitMQ 3.10 to 4.3"), "{unknown}: {said}");
        assert!(said.contains(&format!("judge it as {nearest}")), "{unknown}: {said}");
        assert!(!text(&out.stdout).contains("Clean"), "{unknown}");
    }
}

// ---------------------------------------------------------------------------------------------
// --format
// ---------------------------------------------------------------------------------------------

/// A --format a command cannot print is refused (exit 2) with what it prints instead; where
/// --format is given (before or after the command) makes no difference.
#[test]
fn a_format_a_command_cannot_print_is_refused() {
    let scratch = Scratch::new("format");
    let spec = scratch.file("orders.toml", SPEC);
    for (args, says) in [
        (vec!["export", "--format", "table", &spec], "it prints RabbitMQ definitions, which are JSON"),
        (vec!["--format", "table", "export", &spec], "it prints RabbitMQ definitions, which are JSON"),
        (vec!["graph", "--format", "json", &spec], "it draws DOT or Mermaid: choose with --style"),
        (vec!["graph", "--format", "table", &spec], "it draws DOT or Mermaid"),
        (vec!["schema", "--format", "table"], "it prints a JSON Schema"),
        (vec!["completions", "bash", "--format", "json"], "it prints a shell script"),
        (vec!["man", "--format", "json"], "it prints a man page"),
    ] {
        let out = hopper(None, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(text(&out.stderr).contains(says), "{args:?}: {}", text(&out.stderr));
    }
    // What they can print, they print.
    let out = hopper(None, &["export", "--format", "json", &spec]);
    assert_eq!(out.status.code(), Some(0));
    serde_json::from_slice::<Value>(&out.stdout).unwrap();
    assert_eq!(
        hopper(None, &["--format", "json", "compile", &spec]).stdout,
        hopper(None, &["compile", &spec, "--format", "json"]).stdout
    );
}

/// Every JSON document of hopper's own starts with its schema_version, 1.
#[test]
fn every_offline_json_document_has_a_schema_version() {
    let scratch = Scratch::new("schema-version");
    let spec = scratch.file("orders.toml", SPEC);
    for (command, list) in [("compile", "topologies"), ("contract", "contracts"), ("lint", "findings")] {
        let out = hopper(None, &[command, "--format", "json", &spec]);
        let first_key = text(&out.stdout).lines().nth(1).unwrap_or_default().trim().to_string();
        assert_eq!(first_key, "\"schema_version\": 1,", "{command}: schema_version comes first");
        let json: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(json[list].is_array(), "{command}: {json:#}");
    }
}

// ---------------------------------------------------------------------------------------------
// Exit codes for a CI gate, where no broker is needed to tell
// ---------------------------------------------------------------------------------------------

/// With --detailed-exitcode an error is 1, whatever it is: a spec error, a usage error, an
/// unreachable broker; without it, 2 as documented.
#[test]
fn detailed_exitcode_makes_every_error_1() {
    let scratch = Scratch::new("detailed");
    let bad = scratch.file("bad.toml", "[topology.orders]\ndelay = [\"5s\"]\n");
    let good = scratch.file("orders.toml", SPEC);
    let nowhere = ["--amqp-url", "amqp://guest:guest@127.0.0.1:1", "--management-url", "http://127.0.0.1:1/api"];
    for (gate, plain) in [
        (vec!["diff", "--detailed-exitcode", &bad], vec!["diff", &bad]),
        (vec!["apply", "--dry-run", "--detailed-exitcode", &bad], vec!["apply", "--dry-run", &bad]),
        (vec!["diff", "--detailed-exitcode", "--no-such-flag", &good], vec!["diff", "--no-such-flag", &good]),
        ([&["diff", "--detailed-exitcode", &good][..], &nowhere].concat(), [&["diff", &good][..], &nowhere].concat()),
        (
            [&["apply", "--dry-run", "--detailed-exitcode", &good][..], &nowhere].concat(),
            [&["apply", "--dry-run", &good][..], &nowhere].concat(),
        ),
    ] {
        let out = hopper(None, &gate);
        assert_eq!(out.status.code(), Some(1), "{gate:?}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("error"), "{gate:?} says why");
        assert_eq!(hopper(None, &plain).status.code(), Some(2), "{plain:?}");
    }
    // Only with --dry-run: a real apply has no "changes pending".
    let out = hopper(None, &["apply", "--detailed-exitcode", &good]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--dry-run"), "{}", text(&out.stderr));
    // Help is not an error.
    assert_eq!(hopper(None, &["diff", "--detailed-exitcode", "--help"]).status.code(), Some(0));
}

// ---------------------------------------------------------------------------------------------
// README: install
// ---------------------------------------------------------------------------------------------

/// The README's install section gives the command and the minimum Rust that Cargo.toml declares.
#[test]
fn readme_install_section_matches_cargo_toml() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let manifest: toml::Value = toml::from_str(&manifest).unwrap();
    let msrv = manifest["package"]["rust-version"].as_str().expect("Cargo.toml declares rust-version");
    let install = readme.split("## Install").nth(1).expect("README has an Install section");
    let install = install.split("\n## ").next().unwrap();
    assert!(install.contains("cargo install --locked --path ."), "{install}");
    assert!(install.contains(&format!("Rust {msrv} or later")), "README must state Rust {msrv}: {install}");
}
