/** Sent as `sdk_version` when a worker registers; kept equal to package.json's version. */
export const sdkVersion = '0.1.0'
