/** An in-process S3-compatible server (s3rver) on a free port and a temporary directory, for the S3 blob store tests. */
import { rmSync } from "fs";
import { tempDir } from "./platform";

const S3rver = require("s3rver");

export interface LocalS3 {
	url: string;
	bucket: string;
	accessKey: string;
	secretKey: string;
	stop(): Promise<void>;
}

export async function startS3(bucket = "platform-files"): Promise<LocalS3> {
	const dir = tempDir("s3rver-");
	const server = new S3rver({ port: 0, address: "127.0.0.1", silent: true, directory: dir, configureBuckets: [{ name: bucket }] });
	const { port } = await server.run();
	return {
		url: `http://127.0.0.1:${port}`,
		bucket,
		// s3rver's fixed development credentials.
		accessKey: "S3RVER",
		secretKey: "S3RVER",
		async stop() {
			await server.close();
			rmSync(dir, { recursive: true, force: true });
		},
	};
}
