#[cfg(unix)]
mod unix;

#[cfg(windows)]
mod windows;
