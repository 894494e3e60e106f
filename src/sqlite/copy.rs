//! A copy between a file and a PostgreSQL database, the file's side: the
//! file's rows sent out (`export`) and a database's rows taken in
//! (`import`), both through the copied tables' one description
//! (`driver::copy::TABLES`). Writes what `import` writes.

mod export;
mod import;

pub(crate) use export::export;
pub(crate) use import::copy_in;
#[cfg(test)]
pub(crate) use import::insert_sql;
