/** The blob store a node uses for file content: S3-compatible storage when S3_URL/S3_BUCKET are set, else DATA_DIR/files. */
import path from "path";
import type { PlatformConfig } from "../../lib/config";
import { LocalBlobStore } from "./local";
import { S3BlobStore } from "./s3";
import type { BlobStore } from "./types";

export function createBlobStore(cfg: PlatformConfig): BlobStore {
	if (cfg.s3) return new S3BlobStore(cfg.s3);
	return new LocalBlobStore(path.join(cfg.dataDir, "files"));
}

export { LocalBlobStore, S3BlobStore };
export type { BlobStore, BlobInfo } from "./types";
