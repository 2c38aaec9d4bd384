import { defineConfig } from "vitest/config";

// One test file, one real stack: files run one at a time, tests in order.
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    fileParallelism: false,
    testTimeout: 60000,
    hookTimeout: 120000,
  },
});
