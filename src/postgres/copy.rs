//! A copy between a file and a PostgreSQL database, the database's side:
//! a file's rows taken in (`import`) and the database's rows sent out
//! (`export`), both through the copied tables' one description
//! (`driver::copy::TABLES`). Writes what `import` writes.

mod export;
mod import;

#[cfg(test)]
pub(crate) use import::insert_sql;
