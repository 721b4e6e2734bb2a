fn main() {
    println!("outbox-check");
}
