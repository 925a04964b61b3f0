#!/bin/bash
echo running
