// A shellward client in Node, written from the .proto alone: it runs a command, reads a
// typed error from the google.rpc.Status details, and pages through the ledger.
//
//   npm install @grpc/grpc-js @grpc/proto-loader protobufjs
//   node client.js PROTOS_DIR TARGET        # TARGET: unix:/run/user/1000/shellward/shellward.sock
//                                           # or HOST:PORT (with SHELLWARD_TOKEN set)
//
// Prints one JSON line per step: {"step": "run" | "error" | "ledger", ...}.
"use strict";

const grpc = require("@grpc/grpc-js");
const loader = require("@grpc/proto-loader");
const protobuf = require("protobufjs");

const [protosDir, target] = process.argv.slice(2);
const definition = loader.loadSync("shellward/v1/shellward.proto", {
  includeDirs: [protosDir],
  keepCase: true, // field names as in the .proto: call_id, run_id, ...
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
const shellward = grpc.loadPackageDefinition(definition).shellward.v1;
const client = new shellward.Shellward(target, grpc.credentials.createInsecure());

// TCP needs the daemon's token; the Unix socket does not.
const metadata = new grpc.Metadata();
if (process.env.SHELLWARD_TOKEN) {
  metadata.add("authorization", `Bearer ${process.env.SHELLWARD_TOKEN}`);
}

// The two google.rpc messages an error's details use (google/rpc/status.proto and
// error_details.proto hold the same definitions).
const rpc = protobuf.parse(`
  syntax = "proto3";
  package google.rpc;
  message Any { string type_url = 1; bytes value = 2; }
  message Status { int32 code = 1; string message = 2; repeated Any details = 3; }
  message ErrorInfo { string reason = 1; string domain = 2; map<string, string> metadata = 3; }
`, { keepCase: true }).root;
const Status = rpc.lookupType("google.rpc.Status");
const ErrorInfo = rpc.lookupType("google.rpc.ErrorInfo");

// The domain code (ErrorInfo.reason) and its metadata (retryable, call_id, ...) of an error.
function errorInfo(error) {
  const [raw] = error.metadata.get("grpc-status-details-bin");
  if (!raw) return null;
  for (const detail of Status.decode(raw).details) {
    if (detail.type_url.endsWith("/google.rpc.ErrorInfo")) {
      return ErrorInfo.decode(detail.value);
    }
  }
  return null;
}

// RunCommand streams: accepted, output chunks, then one result. Its outcome, even a
// failure, is that result (ok=false and a code); only a refused request is an error.
function runCommand(request) {
  return new Promise((resolve, reject) => {
    let result = null;
    const stream = client.RunCommand(request, metadata);
    stream.on("data", (event) => {
      if (event.result) result = event.result;
    });
    stream.on("error", reject);
    stream.on("end", () => resolve(result));
  });
}

function unary(method, request) {
  return new Promise((resolve, reject) =>
    client[method](request, metadata, (error, reply) => (error ? reject(error) : resolve(reply))),
  );
}

async function main() {
  const result = await runCommand({ command: "echo hello from node", run_id: "node", step_id: "1" });
  console.log(JSON.stringify({
    step: "run", ok: result.ok, code: result.code, call_id: result.metadata.call_id,
    stdout: Buffer.from(result.stdout.data).toString(),
  }));

  try {
    await unary("GetCall", { call_id: "no-such-call" });
  } catch (error) {
    const info = errorInfo(error);
    console.log(JSON.stringify({
      step: "error", status: grpc.status[error.code], reason: info.reason,
      domain: info.domain, metadata: info.metadata, message: error.details,
    }));
  }

  // Pages: pass next_page_token back until it is empty. Output is left out of listings;
  // GetCall fetches one call's.
  const callIds = [];
  let pageToken = "";
  do {
    const page = await unary("ListCalls", { limit: 1, page_token: pageToken });
    callIds.push(...page.calls.map((call) => call.call_id));
    pageToken = page.next_page_token;
  } while (pageToken);
  console.log(JSON.stringify({ step: "ledger", call_ids: callIds }));
  client.close();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
