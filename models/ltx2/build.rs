fn main() {
    fastvideo_build::libtorch_rpath()
}
