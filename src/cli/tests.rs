//! The command's own unit tests: its definition, and its tables.

use super::*;
use clap::CommandFactory;

#[test]
fn the_command_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn tables_align_and_escape() {
    let mut t = Table::new(&["ID", "KEY"]);
    t.row(vec!["1".into(), cell("a\nb")]);
    t.row(vec!["1000".into(), "x".into()]);
    assert_eq!(t.render(), vec!["ID    KEY", "1     a\\nb", "1000  x"]);
}
