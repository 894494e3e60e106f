use super::*;

fn wal_file(dir: &Path) -> (PathBuf, Connection) {
    let path = dir.join("src.db");
    let c = Connection::open(&path).unwrap();
    c.pragma_update(None, "journal_mode", "WAL").unwrap();
    c.execute_batch("CREATE TABLE t (n INTEGER PRIMARY KEY, b BLOB)")
        .unwrap();
    (path, c)
}

fn count(path: &Path) -> i64 {
    Connection::open(path)
        .unwrap()
        .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn every_step_copies_the_snapshot_the_first_one_saw_while_another_connection_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (path, writer) = wal_file(dir.path());
    writer
        .execute_batch(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000) \
             INSERT INTO t SELECT i, randomblob(3000) FROM n",
        )
        .unwrap();
    let reader = Connection::open(&path).unwrap();
    let dest = dir.path().join("copy.db");
    let opts = BackupOptions::default()
        .with_pages_per_step(16)
        .with_pause(Duration::ZERO);
    let mut steps = 0;
    let report = backup(
        &reader,
        &dest,
        &opts,
        &mut |p| {
            steps += 1;
            assert!(p.pages_done <= p.pages_total);
            // Commits between steps: without the one snapshot, each would
            // send the copy back to its first page, and it would hold them.
            writer
                .execute("INSERT INTO t (b) VALUES (randomblob(3000))", [])
                .unwrap();
        },
        &|| true,
    )
    .unwrap();
    assert!(steps > 10, "{steps} steps");
    assert_eq!(count(&dest), 2000, "the moment the backup began");
    assert_eq!(count(&path), 2000 + steps);
    assert_eq!(report.bytes, report.pages * report.page_size);
    assert!(!report.replaced);
    let ok: String = Connection::open(&dest)
        .unwrap()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        4,
        "src.db, its -wal and -shm, copy.db: no temporary file left"
    );
}

#[test]
fn an_existing_destination_is_refused_untouched_unless_replacing_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let (_path, c) = wal_file(dir.path());
    c.execute("INSERT INTO t (b) VALUES (x'00')", []).unwrap();
    let dest = dir.path().join("copy.db");
    std::fs::write(&dest, b"keep me").unwrap();
    let e = backup(&c, &dest, &BackupOptions::default(), &mut |_| {}, &|| true).unwrap_err();
    assert!(
        matches!(e, Error::InvalidInput(ref m) if m.contains("already exists")),
        "{e}"
    );
    assert_eq!(std::fs::read(&dest).unwrap(), b"keep me");
    let opts = BackupOptions::default().with_overwrite(true);
    let r = backup(&c, &dest, &opts, &mut |_| {}, &|| true).unwrap();
    assert!(r.replaced);
    assert_eq!(count(&dest), 1);
    let missing_dir = dir.path().join("nope").join("copy.db");
    let e = backup(&c, &missing_dir, &opts, &mut |_| {}, &|| true).unwrap_err();
    assert!(matches!(e, Error::InvalidInput(_)), "{e}");
    let e = backup(&c, dir.path(), &opts, &mut |_| {}, &|| true).unwrap_err();
    assert!(matches!(e, Error::InvalidInput(_)), "{e}");
}

#[test]
fn a_failed_backup_leaves_no_file_behind() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.db");
    std::fs::write(&src, vec![7u8; 8192]).unwrap();
    let c = Connection::open(&src).unwrap();
    let dest = dir.path().join("copy.db");
    let e = backup(&c, &dest, &BackupOptions::default(), &mut |_| {}, &|| true).unwrap_err();
    assert!(matches!(e, Error::NotADatabase(_)), "{e}");
    assert!(!dest.exists());
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["src.db"], "no temporary file left");
}

#[test]
fn the_queue_file_itself_and_the_files_beside_it_are_refused_even_when_forced() {
    let dir = tempfile::tempdir().unwrap();
    let (path, c) = wal_file(dir.path());
    c.execute("INSERT INTO t (b) VALUES (x'00')", []).unwrap();
    let opts = BackupOptions::default().with_overwrite(true);
    let link = dir.path().join("link.db");
    std::fs::hard_link(&path, &link).unwrap();
    let relative = dir.path().join(".").join("src.db");
    for dest in [
        path.clone(),
        relative,
        link,
        dir.path().join("src.db-wal"),
        dir.path().join("src.db-shm"),
    ] {
        let e = backup(&c, &dest, &opts, &mut |_| {}, &|| true).unwrap_err();
        assert!(
            matches!(e, Error::InvalidInput(ref m) if m.contains("the queue file itself")),
            "{}: {e}",
            dest.display()
        );
    }
    assert_eq!(count(&path), 1);
}
