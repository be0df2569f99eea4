#!/usr/bin/env bash
# build_triton_trt_backend.sh -- reproducible build of Triton's native TensorRT backend
# (libtriton_tensorrt.so) for:
#   * the tritonserver shipped in the nvidia-pytriton 0.7.0 wheel
#     (Triton 2.51.0 = release branch r24.10; TRITONBACKEND API 1.19, TRITONSERVER API 1.34,
#      checked by calling TRITONBACKEND_ApiVersion/TRITONSERVER_ApiVersion in its libtritonserver),
#   * TensorRT 8.6.0 (the pip tensorrt==8.6.0 wheel inside trtkit's .gpu bundle),
#   * CUDA runtime 12.6 (same libcudart 12.6.77 that pytriton's Triton links).
#
# Version choices
#   tensorrt_backend/backend/core/common: all at branch r24.10, i.e. exactly the release of the
#     pytriton server (same backend API 1.19 headers).  tensorrt_backend r24.10 still carries the
#     TensorRT-8 code path (src_trt8/, kept upstream for the iGPU/JetPack TRT 8.6 builds); it is
#     selected by the env var TRT_VERSION < 10, so no source change to the backend code is needed.
#   TensorRT headers: NVIDIA/TensorRT tag v8.6.0 (include/NvInfer*.h, NV_TENSORRT 8.6.0 build 12),
#     the same version as the bundle's libnvinfer.so.8 (the pip wheel ships no headers).
#   RapidJSON: master 24b5e7a8 (Dec 2024); v1.1.0 (2016) trips -Werror with gcc 12.  Its CMake
#     config sets RapidJSON_INCLUDE_DIRS, common reads RAPIDJSON_INCLUDE_DIRS: passed explicitly.
#   CUDA: host code is compiled against CUDA 12.6.77 headers + libcudart.so.12 from the PyPI
#     wheels nvidia-cuda-runtime-cu12==12.6.77 (headers, lib) and nvidia-cuda-nvcc-cu12==12.6.77
#     (only for include/crt/*.h; these wheels ship no nvcc).  The backend-utils gather kernel
#     (backend/src/kernel.cu, only used when the model sets parameter
#     gather_kernel_buffer_threshold > 0; default 0 = never launched) needs nvcc, and the only nvcc
#     here is CUDA 13.0 (/usr/local/cuda-13.0), so that one tiny translation unit is compiled with
#     nvcc 13.0 (-cudart shared, archs 75..90 since CUDA 13 dropped <75).  Its interface is
#     cudaError_t/cudaStream_t/raw pointers only, and its host stubs resolve against libcudart.so.12
#     (checked with nm at the end).  No CUDA-13 struct crosses into the CUDA-12 code.
#
# Source changes in our copies (all in CMake, none in C++):
#   1. tensorrt_backend/CMakeLists.txt: do not link triton-core-serverstub.  The stub would add
#      NEEDED libtritonserver.so, but pytriton ships it renamed (libtritonserver-<hash>.so), so the
#      dlopen would fail.  Without it the TRITONSERVER_*/TRITONBACKEND_* symbols stay undefined and
#      are bound at dlopen time to the libtritonserver already loaded by the tritonserver binary
#      (the way any symbol of the executable's dependencies is), independent of pytriton's hash.
#   2. backend/CMakeLists.txt: CUDA_ARCHITECTURES of kernel_library_new
#      "53;60-real;...;90-real" -> "75-real;80-real;86-real;89-real;90" (nvcc 13 rejects < 75).
#   3. common/src/CMakeLists.txt: drop add_subdirectory(test) (unit tests, which FetchContent
#      googletest from GitHub -- unreachable here; nothing of the backend uses them).
#
# Inputs: the six repositories (bare git copies under $MIRROR/<owner>+<name>/repo where present, else cloned from
# GitHub), the .gpu bundle (TensorRT 8.6.0's libraries, to link against), PyPI (the CUDA 12.6 wheels).
# Output: $OUT_DIR/backends/tensorrt/{libtriton_tensorrt.so,libcudart.so.12}; serve with it through
#   trtkit serve ENGINE --backend tensorrt --triton-backends $OUT_DIR/backends
# Usage (from the project root; about a minute, no GPU needed): bash scripts/build_triton_trt_backend.sh
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=${W:-$ROOT/.gpu-triton-build}
MIRROR=${MIRROR:-/work/.mirror}
BUNDLE=${BUNDLE:-$ROOT/.gpu}
OUT_DIR=${OUT_DIR:-$ROOT/.gpu-triton}
NVCC13=${NVCC13:-/usr/local/cuda-13.0/bin/nvcc}
PY=${PY:-python3}
JOBS=${JOBS:-$(nproc)}

TRT_BACKEND_REV=ffcbe0b51f36f3548431cafdb496ba3204a74232   # tensorrt_backend r24.10
BACKEND_REV=ac03a5d97403dec841ad46d0439e93db12c9268f       # backend r24.10
CORE_REV=bfec7c61dc0939433f64f14e89b1973073eac8ba          # core r24.10
COMMON_REV=578491fc3944f77d16a6a38e3d7691c485c47ba0        # common r24.10
TENSORRT_REV=4af32bad37c905319ca679e62f986f461cb25d49      # NVIDIA/TensorRT v8.6.0
RAPIDJSON_REV=24b5e7a8b27f42fa16b96fc70aade9106cf7102f     # Tencent/rapidjson master 2024-12-22
CUDA_WHEEL_VER=12.6.77

SRC=$W/src; BLD=$W/build; DEPS=$W/deps
mkdir -p "$SRC" "$BLD" "$DEPS"

# ---------------------------------------------------------------- 1. sources
export_rev() { # owner/name rev dest [paths...]: that revision's files, from the local copy or from GitHub
  local name=$1 rev=$2 dest=$3; shift 3
  local repo=$MIRROR/${name/\//+}/repo
  if [[ ! -d $repo ]]; then
    repo=$W/git/${name/\//+}
    [[ -d $repo ]] || git clone -q --bare --filter=blob:none "https://github.com/$name.git" "$repo"
  fi
  rm -rf "$dest"; mkdir -p "$dest"
  git -C "$repo" archive "$rev" "$@" | tar -x -C "$dest"
}
export_rev triton-inference-server/tensorrt_backend $TRT_BACKEND_REV "$SRC/tensorrt_backend"
export_rev triton-inference-server/backend          $BACKEND_REV     "$SRC/backend"
export_rev triton-inference-server/core             $CORE_REV        "$SRC/core"
export_rev triton-inference-server/common           $COMMON_REV      "$SRC/common"
export_rev NVIDIA/TensorRT                          $TENSORRT_REV    "$SRC/TensorRT-8.6.0" include
export_rev Tencent/rapidjson                        $RAPIDJSON_REV   "$SRC/rapidjson"

# source change 1 (see header)
sed -i 's|^    triton-core-serverstub  # from repo-core|    # triton-core-serverstub: not linked, symbols come from the running tritonserver|' \
  "$SRC/tensorrt_backend/CMakeLists.txt"
grep -q 'triton-core-serverstub: not linked' "$SRC/tensorrt_backend/CMakeLists.txt"
# source change 2 (see header)
sed -i 's|CUDA_ARCHITECTURES "53;60-real;62-real;70-real;72-real;75-real;80-real;86-real;89-real;90-real"|CUDA_ARCHITECTURES "75-real;80-real;86-real;89-real;90"|' \
  "$SRC/backend/CMakeLists.txt"
grep -q 'CUDA_ARCHITECTURES "75-real;80-real;86-real;89-real;90"' "$SRC/backend/CMakeLists.txt"

# source change 3 (see header)
sed -i 's|^add_subdirectory(test)$|# add_subdirectory(test)  # unit tests need googletest from the network|' \
  "$SRC/common/src/CMakeLists.txt"
grep -q '^# add_subdirectory(test)' "$SRC/common/src/CMakeLists.txt"

# ---------------------------------------------------------------- 2. TensorRT 8.6.0 libs: TRT_LIBS, else the bundle
# TRT_LIBS: a folder holding libnvinfer.so.8 and libnvinfer_plugin.so.8 of TensorRT 8.6.0, e.g. the folder of an
# installed pip wheel: TRT_LIBS=$(python3 -c 'import os, tensorrt; print(os.path.dirname(tensorrt.__file__))').
# Another 8.6 release needs its own headers too (TENSORRT_REV: the NVIDIA/TensorRT tag of that release).
TRT_IN_TAR=root/.pyenv/versions/3.10.13/lib/python3.10/site-packages/tensorrt
TRTDIR=${TRT_LIBS:-$DEPS/trt86/$TRT_IN_TAR}
if [[ -n ${TRT_LIBS:-} && ! -f $TRTDIR/libnvinfer.so.8 ]]; then
  echo "TRT_LIBS=$TRT_LIBS has no libnvinfer.so.8 (TensorRT 8.6's library)" >&2; exit 2
fi
if [[ ! -f $TRTDIR/libnvinfer.so.8 ]]; then
  [[ -f $BUNDLE/MANIFEST ]] || { echo "no TensorRT 8.6 libraries: set TRT_LIBS, or make the GPU bundle ($BUNDLE)" >&2; exit 2; }
  rm -rf "$DEPS/trt86"; mkdir -p "$DEPS/trt86"
  cat "$BUNDLE"/part*/part* | "$BUNDLE/bin/zstd" -q -d --long=27 \
    | tar -x -C "$DEPS/trt86" "$TRT_IN_TAR/libnvinfer.so.8" "$TRT_IN_TAR/libnvinfer_plugin.so.8" \
        "$TRT_IN_TAR/libcudnn.so.8" "$TRT_IN_TAR/libcublas.so.12" "$TRT_IN_TAR/libcublasLt.so.12"
fi
TRTLINK=$DEPS/trt86-link; mkdir -p "$TRTLINK"
ln -sf "$TRTDIR/libnvinfer.so.8" "$TRTLINK/libnvinfer.so"
ln -sf "$TRTDIR/libnvinfer_plugin.so.8" "$TRTLINK/libnvinfer_plugin.so"

# ---------------------------------------------------------------- 3. CUDA 12.6 headers + libcudart.so.12
CUDA12=$DEPS/cuda-12.6
if [[ ! -f $CUDA12/lib64/libcudart.so.12 ]]; then
  rm -rf "$DEPS/wheels" "$CUDA12"; mkdir -p "$DEPS/wheels" "$CUDA12"/{bin,include,lib64}
  $PY -m pip download -q --no-deps -d "$DEPS/wheels" \
    nvidia-cuda-runtime-cu12==$CUDA_WHEEL_VER nvidia-cuda-nvcc-cu12==$CUDA_WHEEL_VER
  X=$DEPS/wheels/x; rm -rf "$X"; mkdir -p "$X"
  for w in "$DEPS"/wheels/*.whl; do $PY -m zipfile -e "$w" "$X"; done
  cp -a "$X"/nvidia/cuda_runtime/include/. "$CUDA12/include/"
  cp -a "$X"/nvidia/cuda_nvcc/include/crt "$CUDA12/include/"
  cp -a "$X"/nvidia/cuda_runtime/lib/libcudart.so.12 "$CUDA12/lib64/"
  ln -sf libcudart.so.12 "$CUDA12/lib64/libcudart.so"
  rm -f "$CUDA12"/include/__init__.py
  echo "CUDA Version $CUDA_WHEEL_VER" > "$CUDA12/version.txt"   # FindCUDAToolkit sentinel
fi

# ---------------------------------------------------------------- 4. RapidJSON (header-only, install for its CMake config)
RJ=$DEPS/rapidjson
if [[ ! -f $RJ/lib/cmake/RapidJSON/RapidJSONConfig.cmake ]]; then
  cmake -S "$SRC/rapidjson" -B "$BLD/rapidjson" -DCMAKE_INSTALL_PREFIX="$RJ" \
    -DRAPIDJSON_BUILD_DOC=OFF -DRAPIDJSON_BUILD_EXAMPLES=OFF -DRAPIDJSON_BUILD_TESTS=OFF >/dev/null
  cmake --install "$BLD/rapidjson" >/dev/null
fi

# ---------------------------------------------------------------- 5. configure + build the backend
export TRT_VERSION=8.6.0.12          # < 10 selects src_trt8/
rm -rf "$BLD/trt"
cmake -S "$SRC/tensorrt_backend" -B "$BLD/trt" \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_INSTALL_PREFIX="$BLD/install" \
  -DFETCHCONTENT_FULLY_DISCONNECTED=ON \
  -DFETCHCONTENT_SOURCE_DIR_REPO-COMMON="$SRC/common" \
  -DFETCHCONTENT_SOURCE_DIR_REPO-CORE="$SRC/core" \
  -DFETCHCONTENT_SOURCE_DIR_REPO-BACKEND="$SRC/backend" \
  -DTRITON_ENABLE_GPU=ON -DTRITON_ENABLE_STATS=ON -DTRITON_ENABLE_NVTX=OFF \
  -DTRITON_ENABLE_MEMORY_TRACKER=OFF \
  -DTRITON_COMMON_ENABLE_PROTOBUF=OFF -DTRITON_COMMON_ENABLE_GRPC=OFF \
  -DTRITON_CORE_HEADERS_ONLY=ON \
  -DRapidJSON_DIR="$RJ/lib/cmake/RapidJSON" \
  -DRAPIDJSON_INCLUDE_DIRS="$RJ/include" \
  -DCUDAToolkit_ROOT="$CUDA12" \
  -DCMAKE_CUDA_COMPILER="$NVCC13" \
  -DTRITON_TENSORRT_INCLUDE_PATHS="$SRC/TensorRT-8.6.0/include" \
  -DTRITON_TENSORRT_LIB_PATHS="$TRTLINK" \
  -DNVINFER_LIBRARY="$TRTLINK/libnvinfer.so" \
  -DNVINFER_PLUGIN_LIBRARY="$TRTLINK/libnvinfer_plugin.so" \
  -DCMAKE_SHARED_LINKER_FLAGS="-Wl,-rpath-link,$TRTDIR -Wl,-rpath-link,$CUDA12/lib64" \
  2>&1 | tee "$BLD/configure.log"
grep -q "Using CUDA $CUDA_WHEEL_VER" "$BLD/configure.log"   # host code must see the 12.6 toolkit
cmake --build "$BLD/trt" -j "$JOBS" 2>&1 | tee "$BLD/build.log"
cmake --install "$BLD/trt" >/dev/null

# ---------------------------------------------------------------- 6. deliverable
SO=$BLD/install/backends/tensorrt/libtriton_tensorrt.so
DEST=$OUT_DIR/backends/tensorrt
rm -rf "$DEST"; mkdir -p "$DEST"
cp "$SO" "$DEST/"
strip --strip-unneeded "$DEST/libtriton_tensorrt.so"
cp "$CUDA12/lib64/libcudart.so.12" "$DEST/"   # found through RUNPATH $ORIGIN
chmod 755 "$DEST"/*

# sanity checks
readelf -d "$DEST/libtriton_tensorrt.so" | grep -E 'NEEDED|RUNPATH|RPATH'
if readelf -d "$DEST/libtriton_tensorrt.so" | grep -qE 'libtritonserver|libcudart\.so\.13'; then
  echo "unexpected NEEDED entry" >&2; exit 1
fi
ls -la "$DEST"; du -sh "$OUT_DIR"
