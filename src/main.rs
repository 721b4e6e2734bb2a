// Model checking clones and drops millions of small states; mimalloc halves what glibc's
// allocator costs on that path (measured in reports/bench.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    outbox_check::cli::main()
}
