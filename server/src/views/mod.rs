//! Views of a campaign for people: the dashboard page and its data (with its views of time in
//! `history`), and the exports of HR-cases (JSON, CSV, `.wc`); `cli::follow` is the terminal's
//! view.

pub mod dashboard;
pub mod export;
pub mod history;
