// Model checking clones and drops millions of small states; mimalloc makes that allocation
// cheaper than the system allocator does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    outbox_check::cli::main()
}
