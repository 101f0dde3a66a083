-- AlterTable
ALTER TABLE "Instance" ADD COLUMN "components" JSONB;
ALTER TABLE "Instance" ADD COLUMN "imageId" TEXT;

-- CreateTable
CREATE TABLE "InstanceSetup" (
    "instanceId" TEXT NOT NULL PRIMARY KEY,
    "accountId" TEXT NOT NULL,
    "steps" JSONB NOT NULL,
    "output" TEXT NOT NULL DEFAULT '',
    "outputTruncated" BOOLEAN NOT NULL DEFAULT false,
    "updatedAt" DATETIME NOT NULL,
    CONSTRAINT "InstanceSetup_instanceId_fkey" FOREIGN KEY ("instanceId") REFERENCES "Instance" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- CreateTable
CREATE TABLE "Image" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "accountId" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "slug" TEXT NOT NULL,
    "baseImage" TEXT NOT NULL,
    "components" JSONB NOT NULL,
    "resources" JSONB,
    "buildStrategy" TEXT NOT NULL,
    "status" TEXT NOT NULL,
    "artifactKey" TEXT NOT NULL,
    "baseVersion" TEXT,
    "buildPackages" JSONB,
    "buildStep" TEXT,
    "buildProgress" INTEGER NOT NULL DEFAULT 0,
    "buildStartedAt" DATETIME,
    "buildFinishedAt" DATETIME,
    "buildError" TEXT,
    "buildLog" TEXT NOT NULL DEFAULT '',
    "buildLogTruncated" BOOLEAN NOT NULL DEFAULT false,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL,
    CONSTRAINT "Image_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- CreateTable
CREATE TABLE "Environment" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "accountId" TEXT NOT NULL,
    "name" TEXT NOT NULL,
    "currentVersion" INTEGER NOT NULL,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "updatedAt" DATETIME NOT NULL,
    CONSTRAINT "Environment_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- CreateTable
CREATE TABLE "EnvironmentVersion" (
    "id" TEXT NOT NULL PRIMARY KEY,
    "accountId" TEXT NOT NULL,
    "environmentId" TEXT NOT NULL,
    "version" INTEGER NOT NULL,
    "repositories" JSONB NOT NULL,
    "variables" JSONB NOT NULL,
    "secretPaths" JSONB NOT NULL,
    "sealedSecretFiles" TEXT,
    "setupScript" TEXT NOT NULL,
    "createdAt" DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT "EnvironmentVersion_accountId_fkey" FOREIGN KEY ("accountId") REFERENCES "Account" ("id") ON DELETE CASCADE ON UPDATE CASCADE,
    CONSTRAINT "EnvironmentVersion_environmentId_fkey" FOREIGN KEY ("environmentId") REFERENCES "Environment" ("id") ON DELETE CASCADE ON UPDATE CASCADE
);

-- CreateIndex
CREATE INDEX "Image_status_idx" ON "Image"("status");

-- CreateIndex
CREATE UNIQUE INDEX "Image_accountId_name_key" ON "Image"("accountId", "name");

-- CreateIndex
CREATE UNIQUE INDEX "Image_accountId_slug_key" ON "Image"("accountId", "slug");

-- CreateIndex
CREATE UNIQUE INDEX "Environment_accountId_name_key" ON "Environment"("accountId", "name");

-- CreateIndex
CREATE INDEX "EnvironmentVersion_accountId_idx" ON "EnvironmentVersion"("accountId");

-- CreateIndex
CREATE UNIQUE INDEX "EnvironmentVersion_environmentId_version_key" ON "EnvironmentVersion"("environmentId", "version");

-- CreateIndex
CREATE INDEX "Instance_imageId_idx" ON "Instance"("imageId");
