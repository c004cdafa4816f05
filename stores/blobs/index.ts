/** The blob store a node uses for file content: S3-compatible storage when S3_URL/S3_BUCKET are set, else DATA_DIR/files. */
import path from "path";
import type { PlatformConfig } from "../../runtime/config";
import { LocalBlobStore } from "./local";
import type { BlobStore } from "./types";

export function createBlobStore(cfg: PlatformConfig): BlobStore {
	// Loaded only when used: the AWS SDK adds about 80 ms to every node's start-up.
	if (cfg.s3) return new (require("./s3") as typeof import("./s3")).S3BlobStore(cfg.s3);
	return new LocalBlobStore(path.join(cfg.dataDir, "files"));
}

export { LocalBlobStore };
export type { BlobStore, BlobInfo } from "./types";
