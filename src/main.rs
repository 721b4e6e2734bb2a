// Model checking clones and drops millions of small states; mimalloc makes that allocation
// cheaper than the system allocator does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // Rust ignores SIGPIPE, so `outbox-check ... | head` would panic on the closed pipe; a
    // command-line tool should end quietly instead, as the default disposition does.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    outbox_check::cli::main()
}
