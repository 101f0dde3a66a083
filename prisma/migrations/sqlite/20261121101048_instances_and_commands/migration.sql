-- CreateTable
CREATE TABLE "Instance" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "accountId" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "image" TEXT NOT NULL,
    "imageProfile" TEXT NOT NULL,
    "imageVersion" TEXT,
    "artifactKey" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "desiredState" TEXT NOT NULL,
    "vcpu" INTEGER NOT NULL,
    "memoryMib" INTEGER NOT NULL,
    "diskMib" INTEGER NOT NULL,
    "sshPublicKey" TEXT NOT NULL,
    "guestHostname" TEXT NOT NULL,
    "sshHostKeys" JSONB,
    "autoSnapshotSeconds" INTEGER NOT NULL DEFAULT 300,
    "environmentVersionId" TEXT,
    "expiresAt" DATETIME,
    "lastCheckpointAt" DATETIME,
    "sessionSaved" BOOLEAN NOT NULL DEFAULT false,
    "setupStatus" TEXT NOT NULL DEFAULT 'none',
    "setupError" TEXT,
    "operation" TEXT,
    "operationStartedAt" DATETIME,
    "errorMessage" TEXT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL,
    CONSTRAINT "Instance_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- CreateTable
CREATE TABLE "Command" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "accountId" TEXT NOT NULL,
    "instanceId" TEXT NOT NULL,
    "requestHash" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "completionStatus" TEXT,
    "exitCode" INTEGER,
    "signal" INTEGER,
    "durationMs" BIGINT,
    "stdoutBytes" BIGINT,
    "stderrBytes" BIGINT,
    "errorMessage" TEXT,
    "cancelRequestedAt" DATETIME,
    "startedAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL,
    "finishedAt" DATETIME,
    CONSTRAINT "Command_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account" ("id") ON DELETE CASCADE ON UPDATE CASCADE,
    CONSTRAINT "Command_instanceId_fkey" FOREIGN KEY ("instanceId") REFERENCES "Instance" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- CreateIndex
CREATE INDEX "Instance_accountId_createdAt_idx" ON "Instance"("accountId", "createdAt");

-- CreateIndex
CREATE UNIQUE INDEX "Instance_accountId_name_key" ON "Instance"("accountId", "name");

-- CreateIndex
CREATE INDEX "Command_accountId_instanceId_startedAt_idx" ON "Command"("accountId", "instanceId", "startedAt");

-- CreateIndex
CREATE INDEX "Command_instanceId_idx" ON "Command"("instanceId");
