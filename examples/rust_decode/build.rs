// Links libsparkrt_c.so from SPARKRT_LIB_DIR (an installed prefix's lib/ or
// a build tree's lib/) and records that folder as the binary's rpath, so the
// program starts without LD_LIBRARY_PATH.
fn main() {
    println!("cargo:rerun-if-env-changed=SPARKRT_LIB_DIR");
    let dir = match std::env::var("SPARKRT_LIB_DIR") {
        Ok(dir) if !dir.is_empty() => dir,
        _ => panic!(
            "SPARKRT_LIB_DIR is not set: set it to the folder that holds libsparkrt_c.so \
             (<prefix>/lib of an installed sparkrt, or <build>/lib)"
        ),
    };
    println!("cargo:rustc-link-search=native={}", dir);
    println!("cargo:rustc-link-lib=dylib=sparkrt_c");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir);
}
