<#
.SYNOPSIS
  Build Neural for Windows: a one-folder bundle (dist\neural) and the per-user installer
  (dist\Neural-Setup-<version>.exe).

.DESCRIPTION
  Run from any directory in PowerShell on a Windows 10/11 x64 machine that has:
    - Python 3.12 from python.org (the `py` launcher),
    - Visual Studio 2022 Build Tools with "Desktop development with C++" (compiles the native
      expert kernel during `pip install .`),
    - NSIS 3 (makensis.exe on PATH or in its default folder).
  Steps: fresh venv -> torch with CUDA -> `pip install .[build]` -> check the kernel and CUDA
  -> PyInstaller -> headless self-test of the bundle -> makensis.

.EXAMPLE
  powershell -ExecutionPolicy Bypass -File installer\build_windows.ps1
  powershell -ExecutionPolicy Bypass -File installer\build_windows.ps1 -TorchIndex https://download.pytorch.org/whl/cu128
#>
param(
    [string]$PythonVersion = "3.12",
    [string]$TorchVersion = "2.13.0",
    [string]$TorchIndex = "https://download.pytorch.org/whl/cu130",
    [string]$Venv = ".venv-win",
    # The GPU kernels are Triton kernels; on Windows they need triton-windows, bundled by default.
    # 3.8.0.post29 is the newest build (torch 2.13 pairs with Triton 3.9 on Linux; the engine calls
    # Triton directly, not through torch.compile). -WithoutTriton builds a CPU-engine-only bundle.
    [string]$TritonWindows = "3.8.0.post29",
    [switch]$WithoutTriton,
    [switch]$SkipSelfTest,
    [switch]$SkipInstaller
)
$ErrorActionPreference = "Stop"
$Root = Split-Path -Parent $PSScriptRoot
Set-Location $Root

function Invoke-Step([string]$What, [scriptblock]$Command) {
    Write-Host "==> $What" -ForegroundColor Cyan
    & $Command
    if ($LASTEXITCODE -ne 0) { throw "step failed ($LASTEXITCODE): $What" }
}

# 1. A clean virtual environment on Python 3.12.
Invoke-Step "create $Venv with Python $PythonVersion" { py "-$PythonVersion" -m venv $Venv }
$Py = Join-Path $Root "$Venv\Scripts\python.exe"
Invoke-Step "upgrade pip" { & $Py -m pip install --upgrade pip }

# 2. PyTorch built with CUDA (the PyPI wheel for Windows is CPU-only).
Invoke-Step "install torch $TorchVersion with CUDA" { & $Py -m pip install "torch==$TorchVersion" --index-url $TorchIndex }
Invoke-Step "check that torch has CUDA" {
    & $Py -c "import sys, torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda); sys.exit(0 if torch.version.cuda else 1)"
}

# 3. Neural itself; this compiles native\_neural_native.pyd with MSVC, plus PyInstaller (the build extra).
Invoke-Step "pip install .[build]" { & $Py -m pip install ".[build]" }
Invoke-Step "check the native expert kernel" {
    & $Py -c "from native.kernel import load_kernel; k = load_kernel(); print('native kernel', k.best_isa(), sorted(k.features()))"
}
if (-not $WithoutTriton) {
    Invoke-Step "install triton-windows $TritonWindows" { & $Py -m pip install "triton-windows==$TritonWindows" }
    Invoke-Step "check triton-windows and its bundled compiler" {
        & $Py -c "import triton, triton.windows_utils as w; print('triton', triton.__version__, 'CUDA', w.find_cuda()[0])"
    }
    $env:NEURAL_BUNDLE_TRITON = "1"
} else {
    $env:NEURAL_BUNDLE_TRITON = "0"
}

# 4. The one-folder bundle.
$sw = [Diagnostics.Stopwatch]::StartNew()
Invoke-Step "PyInstaller" {
    & $Py -m PyInstaller --noconfirm --clean --log-level WARN --distpath dist --workpath build\pyinstaller installer\neural.spec
}
$size = (Get-ChildItem -Recurse dist\neural | Measure-Object -Property Length -Sum).Sum
Write-Host ("bundle: dist\neural built in {0:N0} s, {1:N2} GiB" -f $sw.Elapsed.TotalSeconds, ($size / 1GB))
if ($size -gt 1.9GB) {
    Write-Warning "the bundle is over 1.9 GiB; NSIS installers hold at most 2 GiB of (compressed) data"
}

# 5. Headless end-to-end check of the bundle: demo model, 16 tokens, one HTTP API request.
if (-not $SkipSelfTest) {
    Invoke-Step "bundle self-test" { & dist\neural\neural.exe --self-test }
    if (-not $WithoutTriton) {
        Invoke-Step "bundle kernels (Triton sources readable)" { & dist\neural\neural.exe --check-kernels }
    }
}

# 6. The installer.
if (-not $SkipInstaller) {
    $makensis = (Get-Command makensis.exe -ErrorAction SilentlyContinue).Source
    if (-not $makensis) { $makensis = "${env:ProgramFiles(x86)}\NSIS\makensis.exe" }
    if (-not (Test-Path $makensis)) { throw "makensis.exe not found: install NSIS 3 from https://nsis.sourceforge.io" }
    $version = (Select-String -Path pyproject.toml -Pattern '^version\s*=\s*"([^"]+)"').Matches[0].Groups[1].Value
    $out = Join-Path $Root "dist\Neural-Setup-$version.exe"
    Invoke-Step "makensis" {
        & $makensis /NOCD "/DBUNDLE_DIR=$Root\dist\neural" "/DVERSION=$version" "/DOUT_FILE=$out" installer\neural.nsi
    }
    Write-Host "installer: $out"
}
