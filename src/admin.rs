//! Operator actions on a queue file: retry, cancel, prune, stats, explain.
//! (to be written)
