/**
 * This package's version, kept equal to package.json's (test/sdk/install.test.ts compares them);
 * a worker registers with it as `sdk_version`.
 */
export const SDK_VERSION = '0.1.0'
