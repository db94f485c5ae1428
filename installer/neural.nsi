; Neural: per-user Windows installer (no administrator rights) for the PyInstaller bundle.
;
;   makensis -DBUNDLE_DIR=<path to dist\neural> [-DVERSION=0.1.0] [-DOUT_FILE=<installer.exe>]
;            [-DCOMPRESSOR=zlib|none] installer\neural.nsi
;
; Relative paths are taken from the directory makensis runs in when it is given /NOCD (-NOCD on
; Linux); the build scripts pass absolute paths. Installs to %LOCALAPPDATA%\Programs\Neural,
; adds Start-menu and desktop shortcuts and an uninstaller registered under HKCU. Conversations
; and settings live in %LOCALAPPDATA%\Neural and survive an uninstall.

Unicode true
!include "MUI2.nsh"
!include "FileFunc.nsh"

!ifndef BUNDLE_DIR
  !error "Pass the PyInstaller bundle folder: makensis -DBUNDLE_DIR=dist\neural installer\neural.nsi"
!endif
!ifndef VERSION
  !define VERSION "0.1.0"
!endif
!ifndef OUT_FILE
  !define OUT_FILE "Neural-Setup-${VERSION}.exe"
!endif
!ifndef COMPRESSOR
  ; Solid LZMA gives the smallest download; CI passes "none" (stored) to keep the check fast.
  !define COMPRESSOR "/SOLID lzma"
!endif

!define APP_NAME "Neural"
!define PUBLISHER "Neural"
!define GUI_EXE "NeuralApp.exe"
!define CLI_EXE "neural.exe"
!define UNINSTALL_KEY "Software\Microsoft\Windows\CurrentVersion\Uninstall\Neural"

; The payload must be a bundle: fail at compile time, not on the user's machine.
!if /FileExists "${BUNDLE_DIR}\_internal\resources\demo-model\config.json"
!else
  !error "${BUNDLE_DIR} is not a Neural bundle (no _internal\resources\demo-model\config.json)"
!endif

!if "${COMPRESSOR}" == "none"
  SetCompress off
!else
  SetCompressor ${COMPRESSOR}
!endif
Name "${APP_NAME} ${VERSION}"
OutFile "${OUT_FILE}"
RequestExecutionLevel user
InstallDir "$LOCALAPPDATA\Programs\${APP_NAME}"
InstallDirRegKey HKCU "Software\${APP_NAME}" "InstallDir"
ShowInstDetails show
ShowUninstDetails show

VIProductVersion "${VERSION}.0"
VIAddVersionKey "ProductName" "${APP_NAME}"
VIAddVersionKey "ProductVersion" "${VERSION}"
VIAddVersionKey "FileVersion" "${VERSION}"
VIAddVersionKey "FileDescription" "${APP_NAME} installer"
VIAddVersionKey "LegalCopyright" "${PUBLISHER}"

!define MUI_ABORTWARNING
!define MUI_FINISHPAGE_RUN "$INSTDIR\${GUI_EXE}"
!define MUI_FINISHPAGE_RUN_TEXT "Start ${APP_NAME} (opens on the bundled demo model)"
!insertmacro MUI_PAGE_WELCOME
!insertmacro MUI_PAGE_DIRECTORY
!insertmacro MUI_PAGE_INSTFILES
!insertmacro MUI_PAGE_FINISH
!insertmacro MUI_UNPAGE_CONFIRM
!insertmacro MUI_UNPAGE_INSTFILES
!insertmacro MUI_LANGUAGE "English"

Function .onInit
  ; Per-user shortcuts ($SMPROGRAMS, $DESKTOP of the current user), whatever the account type.
  SetShellVarContext current
FunctionEnd

Function un.onInit
  SetShellVarContext current
FunctionEnd

Section "Neural" SecMain
  SectionIn RO
  SetOutPath "$INSTDIR"
  ; An update replaces the whole runtime: stale DLLs from an older torch must not linger.
  RMDir /r "$INSTDIR\_internal"
  File /r "${BUNDLE_DIR}\*.*"

  WriteUninstaller "$INSTDIR\Uninstall.exe"

  CreateDirectory "$SMPROGRAMS\${APP_NAME}"
  CreateShortcut "$SMPROGRAMS\${APP_NAME}\${APP_NAME}.lnk" "$INSTDIR\${GUI_EXE}" "" "$INSTDIR\${GUI_EXE}" 0
  ; The doctor is a console program: keep its window open so the checklist can be read.
  CreateShortcut "$SMPROGRAMS\${APP_NAME}\${APP_NAME} Doctor.lnk" "$SYSDIR\cmd.exe" \
    '/k ""$INSTDIR\${CLI_EXE}" doctor"' "$INSTDIR\${CLI_EXE}" 0
  CreateShortcut "$SMPROGRAMS\${APP_NAME}\Uninstall ${APP_NAME}.lnk" "$INSTDIR\Uninstall.exe"
  CreateShortcut "$DESKTOP\${APP_NAME}.lnk" "$INSTDIR\${GUI_EXE}" "" "$INSTDIR\${GUI_EXE}" 0

  WriteRegStr HKCU "Software\${APP_NAME}" "InstallDir" "$INSTDIR"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayName" "${APP_NAME}"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayVersion" "${VERSION}"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "Publisher" "${PUBLISHER}"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "DisplayIcon" "$INSTDIR\${GUI_EXE}"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "InstallLocation" "$INSTDIR"
  WriteRegStr HKCU "${UNINSTALL_KEY}" "UninstallString" '"$INSTDIR\Uninstall.exe"'
  WriteRegStr HKCU "${UNINSTALL_KEY}" "QuietUninstallString" '"$INSTDIR\Uninstall.exe" /S'
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "NoModify" 1
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "NoRepair" 1
  ${GetSize} "$INSTDIR" "/S=0K" $0 $1 $2
  WriteRegDWORD HKCU "${UNINSTALL_KEY}" "EstimatedSize" "$0"
SectionEnd

Section "Uninstall"
  Delete "$DESKTOP\${APP_NAME}.lnk"
  Delete "$SMPROGRAMS\${APP_NAME}\${APP_NAME}.lnk"
  Delete "$SMPROGRAMS\${APP_NAME}\${APP_NAME} Doctor.lnk"
  Delete "$SMPROGRAMS\${APP_NAME}\Uninstall ${APP_NAME}.lnk"
  RMDir "$SMPROGRAMS\${APP_NAME}"

  ; Remove only what the installer put there: a user who picked a shared folder keeps the rest.
  RMDir /r "$INSTDIR\_internal"
  Delete "$INSTDIR\${GUI_EXE}"
  Delete "$INSTDIR\${CLI_EXE}"
  Delete "$INSTDIR\neural"
  Delete "$INSTDIR\Uninstall.exe"
  RMDir "$INSTDIR"

  DeleteRegKey HKCU "${UNINSTALL_KEY}"
  DeleteRegKey HKCU "Software\${APP_NAME}"
SectionEnd
