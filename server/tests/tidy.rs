//! Tidy checks on the server's sources: every module says what it is for in a `//!` line,
//! and the crate forbids `unsafe`.

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_module_starts_with_a_doc_comment() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("tests"), &mut files);
    assert!(files.len() > 10, "found only {files:?}");
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(
            text.starts_with("//!"),
            "{} does not start with a //! line",
            f.display()
        );
    }
}

#[test]
fn the_server_forbids_unsafe() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for f in ["src/lib.rs", "src/main.rs"] {
        let text = std::fs::read_to_string(root.join(f)).unwrap();
        assert!(text.contains("#![forbid(unsafe_code)]"), "{f}");
    }
}
