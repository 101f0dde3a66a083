-- AlterTable
ALTER TABLE "Instance" ADD COLUMN "fromSnapshotId" TEXT;
ALTER TABLE "Instance" ADD COLUMN "startedFrom" TEXT;

-- CreateTable
CREATE TABLE "Snapshot" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "accountId" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "instanceId" TEXT,
    "instanceName" TEXT NOT NULL,
    "image" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "memory" BOOLEAN NOT NULL,
    "vcpu" INTEGER NOT NULL,
    "memoryMib" INTEGER NOT NULL,
    "diskMib" INTEGER NOT NULL,
    "imageProfile" TEXT NOT NULL,
    "imageVersion" TEXT,
    "artifactKey" TEXT NOT NULL,
    "sizeBytes" BIGINT,
    "progress" REAL,
    "error" TEXT,
    "workerId" TEXT,
    "takenBy" TEXT,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "readyAt" DATETIME,
    CONSTRAINT "Snapshot_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account" ("id") ON DELETE CASCADE ON UPDATE CASCADE,
    CONSTRAINT "Snapshot_instanceId_fkey" FOREIGN KEY ("instanceId") REFERENCES "Instance" ("id") ON DELETE SET NULL ON UPDATE CASCADE
);

-- CreateIndex
CREATE INDEX "Snapshot_accountId_createdAt_idx" ON "Snapshot"("accountId", "createdAt");

-- CreateIndex
CREATE INDEX "Snapshot_instanceId_idx" ON "Snapshot"("instanceId");

-- CreateIndex
CREATE UNIQUE INDEX "Snapshot_accountId_name_key" ON "Snapshot"("accountId", "name");
